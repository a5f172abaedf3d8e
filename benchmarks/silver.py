"""Silver against its baseline, on the same bronze data, in one process.

(a) bronze -> parse every value by the protocol -> `noop`: reading and JSON parsing only;
(b) the full silver job: parsing in the JVM (records that are not plain read by the
    protocol in a Python UDF), keying, the per-session state machine in the JVM
    (`SensorSessions.java`), RocksDB state, five Delta tables;
(c) the platform's stateful limit: the same parsing, keying and state API with trivial
    per-session work (count the rows, keep the count in state), `noop` sink;
(d) the same limit in the JVM's state API (`flatMapGroupsWithState`,
    jvm/src/lakehouse/bench/SessionCount.java): what silver could reach at most with its
    session machine off Python;
(e) silver's writes alone: its tables written, batch by batch as (b) writes them (side by
    side; a new checkpoint's first batch replacing them, later ones appending and merging;
    the tables made beforehand, as (b) makes them while its query plans), from rows
    already computed and held in memory (the rows (b) wrote, read back): what the tables
    cost whatever computes them. a / (d + e) bounds what any design keeping these tables
    can reach here.
(f) the seed design as a peer: the JVM's `flatMapGroupsWithState` keyed as silver keys (by
    sensor), a count in state, one row per record appended to Delta;
(g) the Python peer: `applyInPandasWithState`, the same keying, state and rows, appended
    to Delta.
Every line reads the same parsed records, one row per bronze record (`keyed_records`), but
(c), (d), (f) and (g) without the protocol's reading of records that are not plain: that
is silver's own work, on (b)'s line.
Each line runs once untimed (a warm-up: JIT, Python workers, caches), then twice timed;
the best counts. In-stream validation is off here (benchmarks/quality.py measures it).
Prints records/s for each and the ratio b/a, then the state size of 10,000 live sessions,
and a probe of the two Python state APIs doing the same per-session work.

    python -m benchmarks.silver                   # 1M records, 1,000 concurrent sessions
    python -m benchmarks.silver --updates 100     # a quick look
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from benchmarks import state_apis
from benchmarks.common import PeakMemory, run_settings, traffic_parser, traffic_spec
from bronze import sensor_records
from lakehouse.core.settings import Settings
from lakehouse.ops.producer import TrafficSpec, produce
from lakehouse.runtime.spark import build_spark
from lakehouse.services.kafka import EmbeddedKafka
from lakehouse.storage import delta
from silver import reconstruct, row_changes, session_rows, sessions
from silver.parsing import keyed_records

PROTOCOL = (
    "session_id STRING, sensor_id STRING, seq BIGINT, kind STRING, event_time STRING, op STRING,"
    " row_id STRING, row STRUCT<row_id: STRING, values: MAP<STRING, STRING>>,"
    " rows ARRAY<STRUCT<row_id: STRING, values: MAP<STRING, STRING>>>"
)


def main() -> None:
    parser = traffic_parser(__doc__)
    parser.add_argument("--state-sessions", type=int, default=10_000, help="0 to skip")
    parser.add_argument(
        "--state-only", action="store_true", help="only the state size and memory section"
    )
    parser.add_argument(
        "--driver-memory", help="spark.driver.memory for the run (default: conf/base.yaml's)"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-silver-") as tmp:
        root = Path(tmp)
        broker = EmbeddedKafka(root / "kafka")
        bootstrap = broker.start()
        try:
            spark: SparkSession | None = None
            if not args.state_only:
                spark = throughput(args, root, bootstrap)
            if args.state_sessions:
                state_size(args, root, bootstrap, spark)
        finally:
            broker.stop()


def throughput(args: argparse.Namespace, root: Path, bootstrap: str) -> SparkSession:
    """Silver and its baselines over the same bronze: records per second and ratios."""
    spec = traffic_spec(args, session_stagger_seconds=0.5, partitions=4)
    settings, spark = ingest(root / "main", bootstrap, spec, "sensors.", None, args.driver_memory)
    total = (
        spark.read.format("delta").load(settings.storage.table_uri("bronze.sensor_records")).count()
    )

    parse_s = best_of(2, lambda n: time_parse_noop(spark, settings, root / f"parse-{n}"))
    limit_s = best_of(2, lambda n: time_stateful_limit(spark, settings, root / f"limit-{n}"))
    jvm_limit_s = best_of(2, lambda n: time_jvm_stateful_limit(spark, settings, root / f"jvm-{n}"))
    silver_s = best_of(2, lambda n: time_silver(spark, settings, root / f"silver-{n}"))
    writes_s = best_of(
        2, lambda n: time_silver_writes(spark, root / "silver-0", root / f"writes-{n}")
    )
    seed_s = best_of(2, lambda n: time_jvm_peer(spark, settings, root / f"seed-{n}"))
    python_s = best_of(2, lambda n: time_python_peer(spark, settings, root / f"python-{n}"))
    print(
        f"\nbronze records:          {total:,} "
        f"({args.sensors * args.sessions:,} concurrent sessions)"
    )
    print(f"(a) bronze->parse->noop: {total / parse_s:>10,.0f} records/s ({parse_s:.1f}s)")
    print(f"(b) full silver job:     {total / silver_s:>10,.0f} records/s ({silver_s:.1f}s)")
    print(f"(c) stateful limit:      {total / limit_s:>10,.0f} records/s ({limit_s:.1f}s)")
    print(f"(d) stateful limit, JVM: {total / jvm_limit_s:>10,.0f} records/s ({jvm_limit_s:.1f}s)")
    print(f"(e) silver's writes:     {total / writes_s:>10,.0f} records/s ({writes_s:.1f}s)")
    print(
        f"(f) peer: JVM state, one row per record to Delta: "
        f"{total / seed_s:>10,.0f} records/s ({seed_s:.1f}s)"
    )
    print(
        f"(g) peer: Python state, one row per record to Delta: "
        f"{total / python_s:>10,.0f} records/s ({python_s:.1f}s)"
    )
    print("every line took bronze in one batch, as (b)'s new checkpoint does")
    print(f"ratio b/a:               {parse_s / silver_s:.2f}")
    print(f"ratio b/f (silver / the seed design): {seed_s / silver_s:.2f}")
    print(f"ratio b/g (silver / the Python peer): {python_s / silver_s:.2f}")
    print(f"ratio c/a:               {parse_s / limit_s:.2f}")
    print(f"ratio b/c:               {limit_s / silver_s:.2f}")
    print(f"ratio d/a:               {parse_s / jvm_limit_s:.2f}")
    print(f"ratio a/(d+e), at most:  {parse_s / (jvm_limit_s + writes_s):.2f}", flush=True)

    probe_apis(spark, settings, root / "probe", total)
    return spark


def state_size(
    args: argparse.Namespace, root: Path, bootstrap: str, spark: SparkSession | None
) -> None:
    """What many live sessions cost: state values, RocksDB on disk, peak memory."""
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
    state_settings, spark = ingest(
        root / "state", bootstrap, wide, "wide.", spark, args.driver_memory
    )
    with PeakMemory(spark) as memory:
        reconstruct.run(spark, state_settings)
    live = reconstruct.live_state(spark, state_settings)
    sizes = live.agg(F.count("*").alias("n"), F.sum("state_bytes").alias("b")).first()
    on_disk = dir_bytes(
        root / "state" / "lake" / "_checkpoints" / "silver" / "sessions_stream" / "state"
    )
    print(f"\nlive sessions in state:  {sizes.n:,}, each a {args.rows}-row table")
    print(
        f"state values (JSON):     {sizes.b / 2**20:,.1f} MiB "
        f"({sizes.b / sizes.n / 1024:,.1f} KiB/session)"
    )
    print(f"RocksDB checkpoint dir:  {on_disk / 2**20:,.1f} MiB on disk")
    print(
        f"peak JVM heap in use:    {memory.heap_bytes / 2**30:.2f} GiB "
        f"(at most; spark.driver.memory {spark.conf.get('spark.driver.memory')})"
    )
    print(
        f"peak RSS:                JVM {memory.jvm_bytes / 2**30:.2f} GiB "
        f"(spark.driver.memory {spark.conf.get('spark.driver.memory')}), "
        f"largest Python worker {memory.worker_bytes / 2**20:,.0f} MiB"
    )


def ingest(
    root: Path,
    bootstrap: str,
    spec: TrafficSpec,
    prefix: str,
    spark: SparkSession | None,
    driver_memory: str | None = None,
) -> tuple[Settings, SparkSession]:
    memory = {"spark__driver_memory": driver_memory} if driver_memory else {}
    settings = run_settings(
        root / "lake",
        bootstrap,
        kafka__topic_prefix=prefix,
        **memory,
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
    """The best of `runs` timed runs after one untimed warm-up."""
    timed("warm-up")
    return min(timed(n) for n in range(runs))


def keyed(spark: SparkSession, settings: Settings) -> DataFrame:
    """Bronze's stream parsed and keyed as silver's is, without the protocol's reading of
    records that are not plain (silver's own work)."""
    return keyed_records(bronze_stream(spark, settings), settings.kafka.topic_prefix).drop(
        "reading"
    )


def bronze_stream(spark: SparkSession, settings: Settings) -> DataFrame:
    """Bronze in one batch, as silver's new checkpoint takes it (`reconstruct.run`): every
    line runs the same batches as (b)."""
    return (
        spark.readStream.format("delta")
        .option("maxFilesPerTrigger", 2**31 - 1)
        .load(settings.storage.table_uri("bronze.sensor_records"))
    )


def one_batch(query: StreamingQuery) -> None:
    """The fairness each line's output claims: it took bronze in one batch, as (b) does."""
    progress = query.lastProgress
    assert progress is not None and progress["batchId"] == 0, f"{query.name}: not one batch"


def time_to_noop(frame: DataFrame, checkpoint: Path) -> float:
    """Seconds for a stream to run what its source holds now into `noop`."""
    started = time.perf_counter()
    query = (
        frame.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = time.perf_counter() - started
    one_batch(query)
    return seconds


def time_parse_noop(spark: SparkSession, settings: Settings, checkpoint: Path) -> float:
    parsed = bronze_stream(spark, settings).select(
        F.from_json(F.col("value").cast("string"), PROTOCOL).alias("m"),
        "topic",
        "partition",
        "offset",
    )
    return time_to_noop(parsed, checkpoint)


def time_stateful_limit(spark: SparkSession, settings: Settings, checkpoint: Path) -> float:
    """What any job keyed by session pays on this platform: silver's own parsing and
    keying, applyInPandasWithState with a count for state, nothing written."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    def count(
        key: tuple[Any, ...], chunks: Iterator[pd.DataFrame], state: Any
    ) -> Iterator[pd.DataFrame]:
        seen = sum(len(chunk) for chunk in chunks) + (state.get[0] if state.exists else 0)
        state.update((seen,))
        yield pd.DataFrame({"session_id": [key[0]], "rows": [seen]})

    parsed = keyed(spark, settings).drop("clock_time")  # silver feeds it to its watermark only
    counted = parsed.groupBy("session_id").applyInPandasWithState(
        count,
        "session_id STRING, rows BIGINT",
        "rows BIGINT",
        "append",
        GroupStateTimeout.NoTimeout,
    )
    return time_to_noop(counted, checkpoint)


def session_count(spark: SparkSession, settings: Settings, method: str) -> DataFrame:
    """Silver's parsed bronze stream through `SessionCount.<method>` (jvm/src/lakehouse/bench)."""
    parsed = keyed(spark, settings)
    jvm = spark._jvm
    assert jvm is not None
    return DataFrame(getattr(jvm.lakehouse.bench.SessionCount, method)(parsed._jdf), spark)


def time_jvm_stateful_limit(spark: SparkSession, settings: Settings, checkpoint: Path) -> float:
    """(d) with the per-session work and state in the JVM instead of Python workers."""
    return time_to_noop(session_count(spark, settings, "bySession"), checkpoint)


def time_to_delta(frame: DataFrame, root: Path) -> float:
    """Seconds for a stream to append what its source holds now to a new Delta table."""
    started = time.perf_counter()
    query = (
        frame.writeStream.format("delta")
        .option("checkpointLocation", str(root / "checkpoint"))
        .trigger(availableNow=True)
        .start(str(root / "table"))
    )
    query.awaitTermination()
    seconds = time.perf_counter() - started
    one_batch(query)
    return seconds


def time_jvm_peer(spark: SparkSession, settings: Settings, root: Path) -> float:
    """(f): the seed design's shape in the JVM's state API, one row per record to Delta."""
    return time_to_delta(session_count(spark, settings, "perRecord"), root)


def time_python_peer(spark: SparkSession, settings: Settings, root: Path) -> float:
    """(g): the same in Python's state API (`applyInPandasWithState`)."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    def per_record(
        key: tuple[Any, ...], chunks: Iterator[pd.DataFrame], state: Any
    ) -> Iterator[pd.DataFrame]:
        seen = state.get[0] if state.exists else 0
        for chunk in chunks:
            counts = range(seen + 1, seen + 1 + len(chunk))
            seen += len(chunk)
            yield pd.DataFrame(
                {
                    "sensor_id": key[0],
                    "session_id": chunk["session_id"],
                    "seq": chunk["seq"],
                    "records": list(counts),
                }
            )
        state.update((seen,))

    parsed = keyed(spark, settings)
    # every parsed column, as silver's state function is handed them (the JVM peer too)
    passed = parsed.groupBy("sensor_id").applyInPandasWithState(
        per_record,
        "sensor_id STRING, session_id STRING, seq BIGINT, records BIGINT",
        "records BIGINT",
        "append",
        GroupStateTimeout.NoTimeout,
    )
    return time_to_delta(passed, root)


def time_silver(spark: SparkSession, settings: Settings, root: Path) -> float:
    fresh = run_settings(root)  # a new checkpoint: all of bronze in its first batch
    # silver reads bronze under its own root: point it at the shared bronze table
    bronze = Path(settings.storage.table_uri("bronze.sensor_records").removeprefix("file://"))
    (root / "bronze").mkdir(parents=True)
    (root / "bronze" / "sensor_records").symlink_to(bronze)
    started = time.perf_counter()
    stats = reconstruct.run(spark, fresh)
    seconds = time.perf_counter() - started
    assert stats.batches == 1, f"silver ran {stats.batches} batches"
    return seconds


def time_silver_writes(spark: SparkSession, finished: Path, root: Path) -> float:
    """(e): the writes of a finished silver run (under `finished`) again, into new tables
    under `root`, batch by batch, from its rows read back and held in memory. Each batch
    writes what the job writes, the way it writes it (`silver.writer`: side by side, the
    first batch of a new checkpoint replacing the tables): its row changes, the latest of
    them into `silver.session_rows`, and the sessions it touched (here their final rows)
    into `silver.sessions`; the job's other tables were empty in (b)."""
    source, target = run_settings(finished), run_settings(root)

    def read(table: str) -> DataFrame:
        return spark.read.format("delta").load(source.storage.table_uri(table))

    changes = read(row_changes.NAME)
    touched = read(sessions.NAME).persist()
    batches = []
    for (batch_id,) in changes.select("batch_id").distinct().orderBy("batch_id").collect():
        batch = changes.where(F.col("batch_id") == batch_id).persist()
        latest = session_rows.latest_changes(batch).persist()
        batches.append((batch, latest, delta.Txn("bench", batch_id)))
    for frame in (touched, *(f for batch, latest, _ in batches for f in (batch, latest))):
        frame.count()
    uri = {spec.name: target.storage.table_uri(spec.name) for spec in reconstruct.SILVER_TABLES}
    # Made before the clock starts, as (b) makes them while its query plans the batch.
    delta.create_all(spark, {uri[spec.name]: spec for spec in reconstruct.SILVER_TABLES})
    started = time.perf_counter()
    for batch, latest, txn in batches:
        rebuild = txn.rebuilds
        delta.side_by_side(
            [
                partial(
                    delta.replace if rebuild else delta.append, batch, uri[row_changes.NAME], txn
                ),
                partial(session_rows.write, batch, uri[session_rows.NAME], txn, latest, rebuild),
                partial(sessions.write, touched, uri[sessions.NAME], txn, rebuild),
            ]
        )
    seconds = time.perf_counter() - started
    for frame in (touched, *(f for batch, latest, _ in batches for f in (batch, latest))):
        frame.unpersist()
    return seconds


def probe_apis(spark: SparkSession, settings: Settings, root: Path, total: int) -> None:
    """The state silver keeps (a session's live row ids, and a count), kept by both Python
    state APIs (`benchmarks.state_apis`)."""
    # one row per row id a record carries, as the probe was first run
    parsed = keyed(spark, settings).select(
        "session_id", F.explode_outer("items.row_id").alias("row_id")
    )
    print("\nstate API probe (a session's live row ids in state, noop sink):")
    for name, frame in state_apis.variants(parsed).items():
        try:
            seconds = time_to_noop(frame, root / name)
        except Exception as error:  # report, do not hide, an API that fails here
            print(f"  {name:<28} failed: {str(error).splitlines()[0][:160]}")
            continue
        print(f"  {name:<28} {total / seconds:>10,.0f} records/s ({seconds:.1f}s)", flush=True)


def dir_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


if __name__ == "__main__":
    main()
