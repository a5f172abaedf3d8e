"""Silver against real Spark and Delta: a reference reconstruction, random micro-batch
splits, crashes, the fail policy and the operator tools."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupStateTimeout

from lakehouse.gameday import reference
from lakehouse.ops.producer import TrafficSpec, produce
from lakehouse.runtime.streams import StreamRun
from lakehouse.storage import catalog
from silver import processor, reconstruct, sessions
from silver.session_state import STATE_VERSION
from tests.support import compiled_plans, overrides, run_lakehouse, settings_for
from tests.support.bronze_tables import kafka_records, write_bronze
from tests.support.kafka import consume_all
from tests.support.silver import assert_matches, silver_tables, small_spec

pytestmark = pytest.mark.integration

SILVER_FAULTS = ("gap", "duplicate", "reorder", "malformed_json", "missing_field", "wrong_type")


@settings(
    max_examples=5,  # each example is two silver runs: the suite's budget
    deadline=None,
    print_blob=True,  # a failure prints the decorator that replays its example here
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    seed=st.integers(0, 10_000),
    commits=st.integers(1, 4),
    files_per_batch=st.integers(1, 2),
    faults=st.lists(st.sampled_from(SILVER_FAULTS), max_size=6).map(Counter),
    # Where bronze is cut into commits and how each commit is shuffled: Hypothesis's own
    # draws, so that a failing split shrinks to a smaller one.
    rng=st.randoms(use_true_random=False),
)
def test_silver_equals_the_reference_for_any_split_into_micro_batches(
    spark: SparkSession,
    tmp_path_factory: pytest.TempPathFactory,
    seed: int,
    commits: int,
    files_per_batch: int,
    faults: Counter[str],
    rng: random.Random,
) -> None:
    with compiled_plans(spark):  # the claim is made on the plans as deployed
        silver_equals_the_reference(spark, tmp_path_factory.mktemp("split"), seed, commits,
                                    files_per_batch, faults, rng)  # fmt: skip


def silver_equals_the_reference(
    spark: SparkSession, root: Path, seed: int, commits: int, files_per_batch: int,
    faults: Counter[str], rng: random.Random,
) -> None:  # fmt: skip
    # Reconstruction alone, batch by batch: validation is tested in test_quality*.py.
    s = settings_for(
        root,
        "127.0.0.1:9",
        "sensors.",
        silver__max_files_per_trigger=str(files_per_batch),
        quality__validate_streams="false",
    )
    records = kafka_records(small_spec(seed, dict(faults)))
    bronze = s.storage.table_uri("bronze.sensor_records")
    # A new checkpoint takes all of bronze in one batch; from then on, batches split it.
    first = rng.randrange(1, len(records) // 2)
    write_bronze(spark, bronze, records[:first], 1, rng)
    reconstruct.run(spark, s)
    write_bronze(spark, bronze, records[first:], commits, rng)

    reconstruct.run(spark, s)

    expected = reference.reconstruct(
        [(t, p, o, v) for t, p, o, _, v in records], s.kafka.topic_prefix
    )
    assert_matches(silver_tables(spark, s), expected)
    # Each row change names the batch that wrote it: the checkpoint's first read the first
    # commit (its records may still change rows later, after a gap), later ones the rest.
    changes = spark.read.format("delta").load(s.storage.table_uri("silver.row_changes"))
    later = {(t, p, o) for t, p, o, _, _ in records[first:]}
    batches = [(r.batch_id, (r.topic, r.partition, r.offset) in later) for r in changes.collect()]
    assert all(batch >= 1 for batch, is_later in batches if is_later)
    assert min(batch for batch, _ in batches) == 0


def test_compiled_plans_generate_code_inside_their_block_only(spark: SparkSession) -> None:
    # The reference claim above stands on the plans as deployed only if the switch works.
    def compiled() -> bool:
        plan = spark.range(3).where("id > 1")._jdf.queryExecution().executedPlan()
        return "*(1)" in plan.toString()

    assert not compiled()
    with compiled_plans(spark):
        assert compiled()
    assert not compiled()


def test_a_new_checkpoint_reads_bronze_in_kafka_order_whatever_the_age_of_its_files(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Compaction rewrites old records into the newest file, and Delta lists a new stream's
    # files by modification time: here the oldest records come last in that list.
    s = settings_for(tmp_path, "127.0.0.1:9", "sensors.", silver__max_files_per_trigger="1",
                     quality__validate_streams="false")  # fmt: skip
    records = kafka_records(small_spec(23, {"gap": 1}, sensors=1))
    bronze = s.storage.table_uri("bronze.sensor_records")
    for chunk in (records[:4], records[4:-4], records[-4:]):
        write_bronze(spark, bronze, chunk, 1, random.Random(23))
    sizes = sorted(Path(f.removeprefix("file:")).stat().st_size
                   for f in spark.read.format("delta").load(bronze).inputFiles())  # fmt: skip
    # OPTIMIZE takes the files under this size: the two small ones, not the large middle one.
    spark.conf.set("spark.databricks.delta.optimize.minFileSize", str(sizes[-1]))
    try:
        spark.sql(f"OPTIMIZE delta.`{bronze}`")
    finally:
        spark.conf.unset("spark.databricks.delta.optimize.minFileSize")
    files = (
        spark.read.format("delta")
        .load(bronze)
        .select("partition", "offset", F.input_file_name().alias("file"))
    )
    first = files.where(F.col("partition") == records[0][1]).where(F.col("offset") == records[0][2])
    newest = max((r["file"] for r in files.select("file").distinct().collect()),
                 key=lambda f: Path(f.removeprefix("file:")).stat().st_mtime_ns)  # fmt: skip
    assert first.first()["file"] == newest  # type: ignore[index]

    reconstruct.run(spark, s)

    expected = reference.reconstruct(
        [(t, p, o, v) for t, p, o, _, v in records], s.kafka.topic_prefix
    )
    assert_matches(silver_tables(spark, s), expected)


def test_faults_from_the_broker_become_violations_by_reason(
    spark: SparkSession, kafka_bootstrap: str, tmp_path: Path
) -> None:
    from bronze import sensor_records

    prefix = "silver.sensors."
    faults = {
        "gap": 2,
        "duplicate": 2,
        "reorder": 1,
        "malformed_json": 1,
        "missing_field": 1,
        "wrong_type": 1,
        "oversize": 1,
        "null_key": 1,
    }
    produce(
        TrafficSpec(
            seed=5,
            sensors=3,
            sessions_per_sensor=4,
            rows_per_snapshot=50,
            updates_per_session=60,
            faults=faults,
            topic_prefix=prefix,
            partitions=2,
        ),
        kafka_bootstrap,
    )
    s = settings_for(tmp_path, kafka_bootstrap, prefix)
    sensor_records.run(spark, s)

    reconstruct.run(spark, s)

    _, by_reason = reconstruct.counts(spark, s)
    primary = {reason: n for reason, n in by_reason.items() if reason != "quarantined"}
    # strict mode: a reorder shows as a gap, and so does the seq a truncated value took with
    # it, and the seq of a record the bronze suite quarantined (null key, oversize value)
    assert primary == {"gap": 6, "duplicate": 2, "unparsable": 1, "invalid": 2}
    bronze = spark.read.format("delta").load(s.storage.table_uri("bronze.sensor_records"))
    admitted = [(r.topic, r.partition, r.offset, bytes(r.value)) for r in bronze.collect()]
    assert len(admitted) == len(consume_all(kafka_bootstrap, prefix)) - 2
    assert_matches(silver_tables(spark, s), reference.reconstruct(admitted, s.kafka.topic_prefix))


def test_a_checkpoint_of_an_older_state_version_is_refused_with_one_line(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lakehouse.core.errors import LakehouseError

    s = settings_for(tmp_path, "127.0.0.1:9", "sensors.", quality__validate_streams="false")
    bronze = s.storage.table_uri("bronze.sensor_records")
    records = kafka_records(small_spec(22, {}))
    write_bronze(spark, bronze, records, 1, random.Random(22))
    checkpoint = s.storage.checkpoint_uri(reconstruct.CHECKPOINT)
    # State version 3 kept one applyInPandasWithState group per session id.
    old = spark.readStream.format("delta").load(bronze).withColumn("session_id", F.col("key"))
    query = (
        old.groupBy("session_id")
        .applyInPandasWithState(
            lambda key, rows, state: iter([]),
            "session_id BINARY",
            "n BIGINT",
            "append",
            GroupStateTimeout.NoTimeout,
        )
        .writeStream.format("noop")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()

    with pytest.raises(LakehouseError) as refused:
        reconstruct.run(spark, s)

    assert f"state older than version {STATE_VERSION}" in str(refused.value)
    assert "lakehouse run silver --full-refresh" in str(refused.value)
    reconstruct.run(spark, s, StreamRun(full_refresh=True))
    expected = reference.reconstruct(
        [(t, p, o, v) for t, p, o, _, v in records], s.kafka.topic_prefix
    )
    assert_matches(silver_tables(spark, s), expected)
    # The rebuilt checkpoint notes its layout: code of the next one refuses it, naming the
    # way that keeps the live version answering (docs/operations.md).
    monkeypatch.setattr(reconstruct, "STATE_VERSION", STATE_VERSION + 1)
    with pytest.raises(LakehouseError, match="`lakehouse shadow start silver`"):
        reconstruct.run(spark, s)


def test_silver_waits_for_bronze_s_table_when_continuous_and_says_what_to_do_when_not(
    spark: SparkSession, tmp_path: Path
) -> None:
    from lakehouse.core.errors import LakehouseError

    s = settings_for(tmp_path, "127.0.0.1:9", "sensors.", quality__validate_streams="false")
    with pytest.raises(LakehouseError, match="ingest first, with `lakehouse run bronze`"):
        reconstruct.run(spark, s)

    # As `run all` starts both streams on a new lake: bronze's table comes a moment later.
    stop, ran = threading.Event(), []
    silver = threading.Thread(
        target=lambda: ran.append(reconstruct.run(spark, s, StreamRun(continuous=True, stop=stop)))
    )
    silver.start()
    sessions_table = s.storage.table_uri(sessions.NAME)
    try:
        time.sleep(2)
        assert silver.is_alive() and not catalog.is_delta(spark, sessions_table)
        write_bronze(
            spark, s.storage.table_uri("bronze.sensor_records"),
            kafka_records(small_spec(5, {})), 1, random.Random(5),
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while not _holds_rows(spark, sessions_table) and time.monotonic() < deadline:
            time.sleep(1)
    finally:
        stop.set()  # never a stream left running in the session the other tests share
        silver.join(120)
    assert ran and ran[0].input_rows > 0 and _holds_rows(spark, sessions_table)


def _holds_rows(spark: SparkSession, uri: str) -> bool:
    return catalog.is_delta(spark, uri) and bool(spark.read.format("delta").load(uri).take(1))


def test_fail_policy_stops_the_job_with_one_line_naming_session_and_offset(
    spark: SparkSession, tmp_path: Path
) -> None:
    rule = '[{topics: ".*", mode: strict, policy: fail, window: 1}]'
    env = overrides(tmp_path, "127.0.0.1:9", "sensors.", silver__integrity=rule)
    s = settings_for(tmp_path, "127.0.0.1:9", "sensors.")
    records = kafka_records(small_spec(3, {"gap": 1}, sensors=1, sessions_per_sensor=1))
    write_bronze(spark, s.storage.table_uri("bronze.sensor_records"), records, 1, random.Random(3))

    result = run_lakehouse("run", "silver", env=env)

    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("lakehouse: error: silver.sessions_stream failed: IntegrityError: ")
    assert "integrity violation (gap) in session sensor-001-0000-" in last
    assert "at sensors.sensor-001/" in last and "expected seq" in last


def test_trace_writes_each_transition_and_inspect_reads_live_state(
    spark: SparkSession, tmp_path: Path
) -> None:
    env = overrides(tmp_path, "127.0.0.1:9", "sensors.")
    s = settings_for(tmp_path, "127.0.0.1:9", "sensors.")
    records = kafka_records(small_spec(4, {"gap": 1}, sensors=1, sessions_per_sensor=2))
    write_bronze(spark, s.storage.table_uri("bronze.sensor_records"), records, 1, random.Random(4))
    traced = sorted({reference.session_of(v) for *_, v in records})[0]
    assert traced is not None

    reconstruct.run(spark, s, StreamRun(trace=frozenset({traced})))

    path = s.storage.table_uri("silver.state_transitions")
    steps = spark.read.format("delta").load(path).orderBy("offset").collect()
    assert {r.session_id for r in steps} == {traced}
    assert len(steps) == sum(1 for *_, v in records if reference.session_of(v) == traced)
    assert steps[0].action == "apply" and '"status": "open"' in steps[0].after
    inspect = run_lakehouse("inspect", "--session", traced, env=env)
    assert inspect.returncode == 0, inspect.stderr[-2000:]
    assert f"{traced}" in inspect.stdout and "1 live sessions" in inspect.stdout
    # A rebuild without the trace gets no steps: the ones the table held are replaced
    # all the same (a rebuild leaves alone only a table that holds nothing).
    reconstruct.run(spark, s, StreamRun(full_refresh=True))
    assert spark.read.format("delta").load(path).count() == 0


def test_state_schema_change_against_an_old_checkpoint_says_what_to_do(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lakehouse.core.errors import LakehouseError

    s = settings_for(tmp_path, "127.0.0.1:9", "sensors.")
    path = s.storage.table_uri("bronze.sensor_records")
    write_bronze(spark, path, kafka_records(small_spec(8, {}, sensors=1)), 1, random.Random(8))
    reconstruct.run(spark, s)
    write_bronze(spark, path, kafka_records(small_spec(9, {}, sensors=1)), 1, random.Random(9))
    monkeypatch.setattr(processor, "STATE_SCHEMA", processor.STATE_SCHEMA + ", extra STRING")

    with pytest.raises(LakehouseError) as error:
        reconstruct.run(spark, s)

    message = str(error.value)
    assert "state" in message and "schema" in message
    assert "new checkpoint" in message and "sessions_stream" in message
