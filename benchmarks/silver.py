"""Silver against its baseline, on the same bronze data, in one process.

(a) bronze -> parse every value by the protocol -> `noop`: reading and JSON parsing only;
(b) the full silver job: keying, the per-session state machine in Python workers, RocksDB
    state, five Delta tables.
In-stream validation is off here (benchmarks/quality.py measures it).
Prints records/s for each and the ratio b/a, then the state size of 10,000 live sessions,
and a probe of the two Python state APIs doing the same per-session work.

    python -m benchmarks.silver                   # 1M records, 1,000 concurrent sessions
    python -m benchmarks.silver --updates 100     # a quick look
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from benchmarks.common import run_settings, traffic_parser, traffic_spec
from bronze import sensor_records
from lakehouse.producer import TrafficSpec, produce
from lakehouse.services.kafka import EmbeddedKafka
from lakehouse.settings import Settings
from lakehouse.spark import build_spark
from silver import reconstruct

PROTOCOL = (
    "session_id STRING, sensor_id STRING, seq BIGINT, kind STRING, event_time STRING, op STRING,"
    " row_id STRING, row STRUCT<row_id: STRING, values: MAP<STRING, STRING>>,"
    " rows ARRAY<STRUCT<row_id: STRING, values: MAP<STRING, STRING>>>"
)


def main() -> None:
    parser = traffic_parser(__doc__)
    parser.add_argument("--state-sessions", type=int, default=10_000, help="0 to skip")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-silver-") as tmp:
        root = Path(tmp)
        broker = EmbeddedKafka(root / "kafka")
        bootstrap = broker.start()
        try:
            spark: SparkSession | None = None
            spec = traffic_spec(args, session_stagger_seconds=0.5, partitions=4)
            settings, spark = ingest(root / "main", bootstrap, spec, "sensors.", spark)
            total = (
                spark.read.format("delta")
                .load(settings.storage.table_uri("bronze.sensor_records"))
                .count()
            )

            parse_s = best_of(2, lambda n: time_parse_noop(spark, settings, root / f"parse-{n}"))
            silver_s = best_of(2, lambda n: time_silver(spark, settings, root / f"silver-{n}"))
            print(
                f"\nbronze records:          {total:,} "
                f"({args.sensors * args.sessions:,} concurrent sessions)"
            )
            print(f"(a) bronze->parse->noop: {total / parse_s:>10,.0f} records/s ({parse_s:.1f}s)")
            print(
                f"(b) full silver job:     {total / silver_s:>10,.0f} records/s ({silver_s:.1f}s)"
            )
            print(f"ratio b/a:               {parse_s / silver_s:.2f}", flush=True)

            probe_apis(spark, settings, root / "probe", total)

            if args.state_sessions:
                per_sensor = args.state_sessions // 20
                wide = TrafficSpec(
                    sensors=20,
                    first_sensor=100,
                    sessions_per_sensor=per_sensor,
                    updates_per_session=5,
                    rows_per_snapshot=args.rows,
                    session_stagger_seconds=0.0,
                    end_sessions=False,
                    partitions=4,
                )
                state_settings, spark = ingest(root / "state", bootstrap, wide, "wide.", spark)
                reconstruct.run(spark, state_settings)
                live = reconstruct.live_state(spark, state_settings)
                sizes = live.agg(F.count("*").alias("n"), F.sum("state_bytes").alias("b")).first()
                on_disk = dir_bytes(
                    root
                    / "state"
                    / "lake"
                    / "_checkpoints"
                    / "silver"
                    / "sessions_stream"
                    / "state"
                )
                print(f"\nlive sessions in state:  {sizes.n:,}, each a {args.rows}-row table")
                print(
                    f"state values (JSON):     {sizes.b / 2**20:,.1f} MiB "
                    f"({sizes.b / sizes.n / 1024:,.1f} KiB/session)"
                )
                print(f"RocksDB checkpoint dir:  {on_disk / 2**20:,.1f} MiB on disk")
        finally:
            broker.stop()


def ingest(
    root: Path, bootstrap: str, spec: TrafficSpec, prefix: str, spark: SparkSession | None
) -> tuple[Settings, SparkSession]:
    settings = run_settings(
        root / "lake", bootstrap, kafka__topic_prefix=prefix, silver__max_files_per_trigger="40"
    )
    spec = replace(spec, topic_prefix=prefix)
    print(
        f"producing {spec.sensors * spec.sessions_per_sensor:,} sessions ...",
        flush=True,
    )
    produce(spec, bootstrap, progress=True)
    spark = spark or build_spark(settings, app_name="bench-silver")
    sensor_records.run(spark, settings)
    return settings, spark


def best_of(runs: int, timed: Any) -> float:
    return min(timed(n) for n in range(runs))


def bronze_stream(spark: SparkSession, settings: Settings) -> DataFrame:
    return (
        spark.readStream.format("delta")
        .option("maxFilesPerTrigger", settings.silver.max_files_per_trigger)
        .load(settings.storage.table_uri("bronze.sensor_records"))
    )


def time_parse_noop(spark: SparkSession, settings: Settings, checkpoint: Path) -> float:
    parsed = bronze_stream(spark, settings).select(
        F.from_json(F.col("value").cast("string"), PROTOCOL).alias("m"),
        "topic",
        "partition",
        "offset",
    )
    started = time.perf_counter()
    query = (
        parsed.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return time.perf_counter() - started


def time_silver(spark: SparkSession, settings: Settings, root: Path) -> float:
    fresh = run_settings(
        root, silver__max_files_per_trigger=str(settings.silver.max_files_per_trigger)
    )
    # silver reads bronze under its own root: point it at the shared bronze table
    bronze = Path(settings.storage.table_uri("bronze.sensor_records").removeprefix("file://"))
    (root / "bronze").mkdir(parents=True)
    (root / "bronze" / "sensor_records").symlink_to(bronze)
    started = time.perf_counter()
    reconstruct.run(spark, fresh)
    return time.perf_counter() - started


def probe_apis(spark: SparkSession, settings: Settings, root: Path, total: int) -> None:
    """The same per-session work (keep a dict of rows, JSON in state) in both Python APIs."""
    from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
    from pyspark.sql.streaming.state import GroupStateTimeout

    keyed = reconstruct.key_records(bronze_stream(spark, settings))

    def fold(table: dict[str, Any], values: pd.Series) -> None:
        for raw in values:
            message = json.loads(raw)
            for row in message.get("rows") or [
                message.get("row") or {"row_id": message.get("row_id")}
            ]:
                table[str(row.get("row_id"))] = row.get("values")

    def with_state(
        key: tuple[Any, ...], chunks: Iterator[pd.DataFrame], state: Any
    ) -> Iterator[pd.DataFrame]:
        table = json.loads(state.get[0]) if state.exists else {}
        for chunk in chunks:
            fold(table, chunk["value"])
        state.update((json.dumps(table),))
        yield pd.DataFrame({"session_id": [key[0]], "rows": [len(table)]})

    class Processor(StatefulProcessor):
        def init(self, handle: StatefulProcessorHandle) -> None:
            self.table = handle.getValueState("table", "body STRING")

        def handleInputRows(
            self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
        ) -> Iterator[pd.DataFrame]:
            table = json.loads(self.table.get()[0]) if self.table.exists() else {}
            for chunk in rows:
                fold(table, chunk["value"])
            self.table.update((json.dumps(table),))
            yield pd.DataFrame({"session_id": [key[0]], "rows": [len(table)]})

        def close(self) -> None:
            pass

    grouped = keyed.groupBy("session_id")
    variants = {
        "applyInPandasWithState": grouped.applyInPandasWithState(
            with_state,
            "session_id STRING, rows BIGINT",
            "body STRING",
            "append",
            GroupStateTimeout.NoTimeout,
        ),
        "transformWithStateInPandas": grouped.transformWithStateInPandas(
            Processor(), "session_id STRING, rows BIGINT", "Append", "None"
        ),
    }
    print("\nstate API probe (same per-session work, noop sink):")
    for name, frame in variants.items():
        started = time.perf_counter()
        try:
            (
                frame.writeStream.format("noop")
                .option("checkpointLocation", str(root / name))
                .trigger(availableNow=True)
                .start()
                .awaitTermination()
            )
        except Exception as error:  # report, do not hide, an API that fails here
            print(f"  {name:<28} failed: {str(error).splitlines()[0][:160]}")
            continue
        seconds = time.perf_counter() - started
        print(f"  {name:<28} {total / seconds:>10,.0f} records/s ({seconds:.1f}s)", flush=True)


def dir_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


if __name__ == "__main__":
    main()
