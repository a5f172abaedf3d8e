"""The console holds the project's lines only: a live line on a terminal that plain lines
clear, nothing extra elsewhere, and other programs' output told apart (`foreign_lines`)."""

from __future__ import annotations

import io
import logging
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.logger import PySparkLogger

from lakehouse.core.console import Live, divert, echo
from tests.support import foreign_lines

PROJECT = """\
sent 247 records to 2 topics (231/s)
  by kind:  end=4, snapshot=4, update=239
bronze.sensor_records: batch 0 wrote 247 rows (50/s), 247 this run
[4/8] check check:silver.sessions WARN (4.0s): violation_rate_below_bound (warn): unexpected 1
  WARN silver.sessions              3/4 expectations passed  (2026-11-26 02:35:53 UTC)
      FAILED violation_rate_below_bound (warn): unexpected 1
count(1)
--------
       2
(1 row)
Spark log: /tmp/state/logs/lakehouse-bronze.log
lakehouse: error: silver failed: org.apache.hadoop.fs.s3a.AWSClientIOException (whole trace in x)
"""
FOREIGN = """\
WARNING: Using incubator modules: jdk.incubator.vector
02:32:37 WARN HiveExternalCatalog: Couldn't find corresponding Hive SerDe for data source provider
25/11/26 02:32:37 WARN NativeCodeLoader: Unable to load native-hadoop library for your platform
2026-11-26 02:33:25 WARN TransformWithStateInPySparkStateServer: Value state sensor doesn't contain
[2026-11-26 02:32:20,123] INFO [KafkaRaftServer nodeId=1] Kafka Server started (kafka.server.Kafka
WARN  Utils: Service 'SparkUI' could not bind on port 4040. Attempting port 4041.
Setting default log level to "WARN".
To adjust logging level use sc.setLogLevel(newLevel). For SparkR, use setLogLevel(newLevel).
SLF4J(W): No SLF4J providers were found.
ERROR StatusLogger Reconfiguration failed: No configuration found for '18b4aac2' at 'null'
Warning: Ignoring non-Spark config property: hive.metastore.uris
java.lang.IllegalStateException: Cannot call methods on a stopped SparkContext.
	at org.apache.spark.SparkContext.assertNotStopped(SparkContext.scala:122)
	at java.base/java.lang.Thread.run(Thread.java:1583)
Caused by: java.net.ConnectException: Connection refused
	... 12 more
Traceback (most recent call last):
/work/.venv/lib/python3.11/site-packages/pyspark/pandas/utils.py:1016: FutureWarning: iteritems
WARNING:py4j.clientserver:Answer received: !yv
Starting Streaming TransformWithStateInPandas Python worker.
Streaming TransformWithStateInPandas Python worker finish init stage of Python runner.
Deleted 0 files and directories in a total of 1 directories.
Thu Nov 26 02:32:20 UTC 2026 : Apache Derby Network Server - 10.16.1.1 - (1901046) started
Calculating Metrics:  100%|██████████| 8/8 [00:00<00:00, 254.60it/s]
"""


def test_foreign_lines_are_those_of_spark_hive_derby_kafka_the_jvm_and_python() -> None:
    assert foreign_lines(PROJECT + FOREIGN) == FOREIGN.splitlines()


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_a_live_line_is_rewritten_in_place_and_cleared_by_a_plain_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)

    with Live("producing") as live:
        live.show("5 records sent")
        echo("done")

    assert terminal.getvalue() == "\r\x1b[2Kproducing: 5 records sent (0s)\r\x1b[2Kdone\n"


def test_off_a_terminal_a_live_line_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with Live("producing") as live:
        live.show("5 records sent")
        echo("done")

    assert capsys.readouterr().out == "done\n"


@pytest.fixture
def restored_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers = root.handlers[:]
    context = PySparkLogger.getLogger("SQLQueryContextLogger")
    context_handlers = context.handlers[:]
    # A command run in this process before (a CLI test) may have captured warnings already,
    # and captureWarnings(True) then keeps the showwarning it found: start from none.
    logging.captureWarnings(False)
    yield
    root.handlers[:] = handlers
    context.handlers[:] = context_handlers
    logging.captureWarnings(False)


def test_python_warnings_and_library_logging_go_to_the_log_not_the_console(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], restored_logging: None
) -> None:
    log = tmp_path / "logs" / "lakehouse-test.log"

    divert(log)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("iteritems is deprecated", FutureWarning, stacklevel=1)
    logging.getLogger("py4j.clientserver").warning("Answer received")
    PySparkLogger.getLogger("SQLQueryContextLogger").error("[TABLE_OR_VIEW_NOT_FOUND]")

    console = capsys.readouterr()
    assert console.out + console.err == ""
    written = log.read_text()
    assert "FutureWarning: iteritems is deprecated" in written
    assert "WARNING py4j.clientserver: Answer received" in written
    assert "[TABLE_OR_VIEW_NOT_FOUND]" in written
