"""The one place a SparkSession is built: Delta, the Kafka connector and RocksDB state."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from lakehouse import jars
from lakehouse.settings import SparkSettings

LOG_CONFIG = Path(__file__).with_name("log4j2.properties")


def build_spark(settings: SparkSettings, app_name: str | None = None) -> SparkSession:
    """A session with the project's pinned jars; `getOrCreate` reuses one in this process."""
    builder = (
        SparkSession.builder.master(settings.master)
        .appName(app_name or settings.app_name)
        .config("spark.jars", ",".join(str(j) for j in jars.jars("spark")))
        .config("spark.driver.memory", settings.driver_memory)
        .config(
            "spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={LOG_CONFIG.as_uri()}"
        )
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        # RocksDB keeps large session state off the JVM heap, and the transformWithState
        # family refuses any other provider; it cannot be changed on an existing checkpoint.
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .config("spark.sql.session.timeZone", "UTC")
        # Jobs print one line per batch; Spark's progress bars would interleave with them.
        .config("spark.ui.showConsoleProgress", "false")
        # pandas deprecation notices from inside PySpark's own serializers, once per task.
        .config("spark.executorEnv.PYTHONWARNINGS", "ignore::FutureWarning")
    )
    for key, value in settings.conf.items():
        builder = builder.config(key, value)
    # Python workers must run this interpreter, which has pandas and pyarrow; PySpark takes
    # the worker interpreter from the driver's environment, not from spark.* settings. A
    # cluster target names its executors' interpreter with spark.pyspark.python.
    os.environ.setdefault(
        "PYSPARK_PYTHON", settings.conf.get("spark.pyspark.python", sys.executable)
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.log_level)
    return spark
