"""Gold over inputs that did not change: `run_models` with each input pinned from its Delta
log (`delta.latest`, as the models run now) against the same with `DESCRIBE DETAIL` and
`DESCRIBE HISTORY` (as they did before 2026-11-28), in one application on one lake.

A scheduled gold run of an idle pipeline does nothing but this. After an untimed warm-up
of each, the two alternate three times, five runs each; the medians count.

    python -m benchmarks.gold_unchanged
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

from benchmarks.common import medians, timed
from benchmarks.gold import Lake
from lakehouse.definitions import MODELS
from lakehouse.runtime import incremental
from lakehouse.runtime.incremental import Source, run_models


def pin_by_describe(spark: SparkSession, name: str, uri: str) -> Source:
    """The baseline: the version, id and size from DESCRIBE, whose DETAIL counts the table's
    files in a Spark job."""
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{uri}`").first()
    version = spark.sql(f"DESCRIBE HISTORY delta.`{uri}` LIMIT 1").first()
    assert detail is not None and version is not None
    return Source(name, uri, int(version["version"]), str(detail["id"]), int(detail["sizeInBytes"]))


def main() -> None:
    pins = {"DESCRIBE": pin_by_describe, "the log": incremental.pin}
    with tempfile.TemporaryDirectory() as folder:
        lake = Lake(Path(folder))
        lake.grow_to(2)

        def unchanged() -> None:
            runs = run_models(lake.spark, lake.settings.storage, MODELS, echo=lambda _: None)
            assert all(r.mode == "unchanged" for r in runs), runs

        seconds: dict[str, list[float]] = {name: [] for name in pins}
        for measured in (False, True, True, True):
            for name, pin in pins.items():
                incremental.pin = pin
                runs = [timed(unchanged) for _ in range(5)]
                if measured:
                    seconds[name] += runs
        incremental.pin = pins["the log"]
    medians(seconds, "DESCRIBE", lambda name: f"gold over unchanged inputs, pinned by {name:8}")


if __name__ == "__main__":
    main()
