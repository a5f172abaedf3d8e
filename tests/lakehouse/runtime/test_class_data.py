"""The driver JVMs' class-data archives: named by what a JVM can use them with, written
under a name of their own, and kept only whole. The JVMs here are real ones (a few lines
of Java that wait for their stdin to close, as Spark's gateway does)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from lakehouse import PROJECT_ROOT
from lakehouse.runtime import class_data

OPTIONS = "spark.driver.extraJavaOptions"
WAITS_FOR_STDIN = "class W { public static void main(String[] a) throws Exception {" \
                  " while (System.in.read() != -1) {} } }"  # fmt: skip


def test_an_archive_is_named_by_the_class_path_it_was_made_with(tmp_path: Path) -> None:
    conf = {"spark.jars": "a.jar,b.jar", "spark.driver.extraClassPath": "c.jar"}
    same = class_data.archive_for(tmp_path, {**conf, "spark.sql.shuffle.partitions": "4"})
    assert same == class_data.archive_for(tmp_path, conf)
    assert same.parent == tmp_path and same.suffix == ".jsa"
    for key in class_data.CLASS_PATH_KEYS:
        assert class_data.archive_for(tmp_path, {**conf, key: "other.jar"}) != same


def test_none_or_an_archive_given_elsewhere_means_none_of_ours(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for variable in class_data.JVM_OPTION_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    conf = {"spark.jars": "a.jar", OPTIONS: "-Dx=1"}
    ours = class_data.archive_for(PROJECT_ROOT / ".state/jvm", conf)
    assert class_data.archive_of(".state/jvm", conf, OPTIONS) == ours
    assert class_data.archive_of("none", conf, OPTIONS) is None
    given = {**conf, OPTIONS: "-XX:SharedArchiveFile=/x.jsa"}
    assert class_data.archive_of(".state/jvm", given, OPTIONS) is None
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-Xshare:off")
    assert class_data.archive_of(".state/jvm", conf, OPTIONS) is None


def test_a_missing_archive_is_written_under_a_name_of_its_own(tmp_path: Path) -> None:
    archive = tmp_path / "k.jsa"
    (first, written), (second, _) = class_data.java_option(archive), class_data.java_option(archive)
    assert first == class_data.WRITE + str(written) and first != second
    assert written is not None and written.parent == tmp_path and not written.exists()
    archive.write_bytes(b"made")
    assert class_data.java_option(archive) == (class_data.USE + str(archive), None)


@pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK")
def test_a_jvm_ended_as_pyspark_ends_it_leaves_an_archive_only_whole(tmp_path: Path) -> None:
    (tmp_path / "W.java").write_text(WAITS_FOR_STDIN)
    archive, written = tmp_path / "k.jsa", tmp_path / "k.1.partial"
    jvm = _jvm(tmp_path, class_data.WRITE + str(written))
    while not (command := class_data.command_of(jvm.pid)):  # the launcher execs itself
        time.sleep(0.05)
    assert class_data.keep(jvm, written, archive, command)
    assert archive.is_file() and not written.exists()
    assert _jvm(tmp_path, class_data.USE + str(archive), "-Xshare:on").communicate()[0] == b""

    cut = tmp_path / "cut.partial"  # as a JVM killed while it wrote would leave it
    cut.write_bytes(archive.read_bytes()[: archive.stat().st_size // 3])
    assert not class_data.usable(cut, command)
    killed = _jvm(tmp_path, class_data.WRITE + str(tmp_path / "k.2.partial"))
    killed.kill()
    assert not class_data.keep(killed, tmp_path / "k.2.partial", tmp_path / "k2.jsa", command)
    assert not (tmp_path / "k2.jsa").exists()


def _jvm(folder: Path, *options: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["java", *options, "-XX:ErrorFile=/dev/null", "W.java"],
        cwd=folder,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
