"""Faults at named moments of a batch, not wherever a sleep lands: every job here runs on a
real S3 server behind a `FaultProxy`, which holds the request that begins the moment and
kills the S3 server or the job right then. Each moment gives the one line (when the job
lives to say it) and a rerun that loses and doubles nothing."""

from __future__ import annotations

import random
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from bronze import sensor_records
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings, StorageSettings, load_settings
from lakehouse.definitions import MODELS, TABLES, VERSIONED, at_versions
from lakehouse.gameday import reconcile, reference
from lakehouse.gameday.faults import (
    Moment,
    in_next_batch,
    kill_job,
    kill_server,
    proxy,
    wait_leases_expired,
    wait_struck,
)
from lakehouse.ops import shadow
from lakehouse.ops.producer import produce
from lakehouse.ops.shadow_compare import compare
from lakehouse.runtime.incremental import run_models
from lakehouse.runtime.streams import checkpoint_format
from lakehouse.services.s3 import EmbeddedS3
from lakehouse.storage import catalog, delta
from lakehouse.storage.buckets import bucket_and_prefix
from lakehouse.storage.lease import TableLease
from silver import reconstruct
from tests.support import S3_KEYS
from tests.support.bronze_tables import kafka_records, write_bronze
from tests.support.kafka import FAULTS, as_tuples, consume_all, quarantined_rows
from tests.support.s3 import (
    FAIL_FAST,
    PREFIX,
    SPEC,
    lakehouse_through,
    read_s3,
    run_stalled,
    s3_env,
    table_version,
    use_s3,
)
from tests.support.silver import assert_matches, silver_tables, small_spec

pytestmark = [pytest.mark.integration, pytest.mark.faults]

LEASE_SECONDS = 2
"""A killed job's leases free this soon, for the next job."""
STALLED_LEASE_SECONDS = 8
"""The lease of a job whose renewal S3 holds: half of it (its margin) outlasts a batch."""

BRONZE = "bronze/sensor_records"
BRONZE_MOMENTS = {
    "before": in_next_batch(
        "before the batch's writes (its offsets)", rf"^PUT /\S+/_checkpoints/{BRONZE}/offsets/\.",
        BRONZE,
    ),
    "parquet": in_next_batch(
        "during a Parquet write", rf"^PUT /\S+/{BRONZE}/part-", BRONZE
    ),
    "delta": in_next_batch(
        "during the Delta commit", rf"^PUT /\S+/{BRONZE}/_delta_log/\d+\.json", BRONZE
    ),
    "checkpoint": in_next_batch(
        "between the Delta commit and the checkpoint's commit",
        rf"^PUT /\S+/_checkpoints/{BRONZE}/commits/\.",
        BRONZE,
    ),
}  # fmt: skip

SILVER = "silver/sessions_stream"
SILVER_MOMENTS = (
    in_next_batch(
        # A batch's state goes up as its changes (RocksDB's changelog), or whole (a snapshot).
        "during the state store's checkpoint",
        rf"^PUT /\S+/_checkpoints/{SILVER}/state/\S+\.(changelog|zip)",
        SILVER,
    ),
    in_next_batch(
        "during silver.row_changes' Delta commit", r"^PUT /\S+/silver/row_changes/_delta_log/",
        SILVER,
    ),
    in_next_batch(
        "between the Delta commits and the checkpoint's commit",
        rf"^PUT /\S+/_checkpoints/{SILVER}/commits/\.",
        SILVER,
    ),
)  # fmt: skip


@pytest.fixture
def server(tmp_path: Path) -> Iterator[EmbeddedS3]:
    """An S3 server of the test's own: the tests kill theirs."""
    s3 = EmbeddedS3(tmp_path / "s3", *S3_KEYS)
    s3.start(buckets=("lake",))
    yield s3
    s3.stop()


def s3_of(server: EmbeddedS3) -> Any:
    """A boto3 client of the running `server`."""
    endpoint = server.address()
    assert endpoint is not None, f"the S3 server is not running (state in {server.home})"
    return server.client(endpoint)


def run_struck(
    args: tuple[str, ...],
    env: dict[str, str],
    server: EmbeddedS3,
    moment: Moment,
    strike: Callable[[Callable[[], subprocess.Popen[str]]], Callable[[], None]],
    log: Path,
) -> tuple[int, str]:
    """Run the CLI through a proxy to `server` that strikes at `moment`, once the leases
    an earlier struck job left have expired: the job's exit code and the proxy's endpoint
    it used."""
    job: subprocess.Popen[str] | None = None
    upstream = server.address()
    assert upstream is not None, "the S3 server is not running"
    wait_leases_expired(s3_of(server), env["LAKEHOUSE__STORAGE__ROOT"])
    began = time.monotonic()

    def current() -> subprocess.Popen[str]:
        assert job is not None
        return job

    with proxy(upstream, moment, strike(current)) as fault:
        job = lakehouse_through(fault.endpoint, args, env, log)
        try:
            wait_struck(fault, 240, lambda: current().poll() is None)
            job.wait(300)
        finally:
            if job.poll() is None:
                kill_job(current)()
    print(f"{moment.name}: struck at {fault.struck_at} after {time.monotonic() - began:.0f}s")
    return job.returncode, fault.endpoint


def test_the_s3_server_killed_at_each_moment_of_a_batch_fails_bronze_in_one_line_and_a_rerun_loses_nothing(  # noqa: E501
    spark: SparkSession, kafka_bootstrap: str, server: EmbeddedS3, tmp_path: Path
) -> None:
    prefix = "outage." + PREFIX
    produce(replace(SPEC, seed=33, topic_prefix=prefix, faults={}), kafka_bootstrap)
    env = s3_env(
        tmp_path,
        kafka_bootstrap,
        server,
        kafka__topic_prefix=prefix,
        bronze__max_offsets_per_trigger="30",
        storage__lease_seconds=str(LEASE_SECONDS),
        spark__conf=FAIL_FAST,
    )
    traced: dict[Path, int] = {}  # the bytes of each trace file before this run
    for key, moment in BRONZE_MOMENTS.items():
        log = tmp_path / f"bronze-{key}.log"
        server.start()  # again after each kill: same ports, same data
        code, endpoint = run_struck(("run", "bronze"), env, server, moment,
                                    lambda _job: kill_server(server), log)  # fmt: skip

        errors = log.read_text()
        assert code == 1, f"{moment.name}: {errors[-2000:]}"
        last = errors.strip().splitlines()[-1]
        assert last.startswith(
            "lakehouse: error: bronze.sensor_records failed: object storage at "
            f"{endpoint.removeprefix('http://')} did not answer "
        ), f"{moment.name}: {last}"
        assert "is the S3 server up? (whole trace in " in last, f"{moment.name}: {last}"
        assert "Traceback" not in errors, f"{moment.name}: {errors[-2000:]}"
        trace = Path(last.rsplit("(whole trace in ", 1)[1].rstrip(")"))
        added = trace.read_bytes()[traced.get(trace, 0) :]
        traced[trace] = traced.get(trace, 0) + len(added)
        assert b"Connection refused" in added, f"{moment.name}: not in this run's trace"

    server.start()
    use_s3(spark, server)
    wait_leases_expired(s3_of(server), env["LAKEHOUSE__STORAGE__ROOT"])
    sensor_records.run(spark, load_settings("local", environ=env))  # in this process's Spark

    table = read_s3(spark, server, f"{env['LAKEHOUSE__STORAGE__ROOT']}/{BRONZE}")
    rows = [(r.topic, r.partition, r.offset, bytes(r.value)) for r in table.collect()]
    sent = {(t, p, o, v) for t, p, o, _, v, _ in consume_all(kafka_bootstrap, prefix)}
    tally = reconcile.kafka_vs_bronze(sent, rows)  # as game day judges it
    assert tally.ok and len(rows) == len(sent), tally.line()


def test_bronze_killed_at_each_moment_of_a_batch_or_stalled_past_its_lease_then_restarted_holds_every_record_once(  # noqa: E501
    spark: SparkSession, kafka_bootstrap: str, server: EmbeddedS3, tmp_path: Path
) -> None:
    """The stalled job: a renewal of its lease that S3 holds past the lease's end, whatever
    the client's timeouts, stops the job before its next commit, in one line."""
    prefix = "kill." + PREFIX
    traffic = replace(SPEC, seed=35, topic_prefix=prefix, sessions_per_sensor=6, faults=FAULTS)
    sent = produce(traffic, kafka_bootstrap)
    env = s3_env(
        tmp_path,
        kafka_bootstrap,
        server,
        kafka__topic_prefix=prefix,
        bronze__max_offsets_per_trigger="60",
        storage__lease_seconds=str(LEASE_SECONDS),
    )
    root = env["LAKEHOUSE__STORAGE__ROOT"]
    server.start()
    for key in ("parquet", "delta", "checkpoint"):
        moment = BRONZE_MOMENTS[key]
        code, _ = run_struck(("run", "bronze"), env, server, moment, kill_job,
                             tmp_path / f"bronze-{key}.log")  # fmt: skip
        assert code == -9, f"{moment.name}: the job ended before it was killed ({code})"
        if key == "checkpoint":
            # The moment that proves the idempotent write: the batch is in the table, its
            # checkpoint does not know it, and the rerun below redoes it.
            batches = len(_keys(server, f"{root}/_checkpoints/{BRONZE}/commits/"))
            assert table_version(spark, server, f"{root}/{BRONZE}") == batches + 1  # 0: CREATE
    stalled = {**env, "LAKEHOUSE__STORAGE__LEASE_SECONDS": str(STALLED_LEASE_SECONDS),
               "LAKEHOUSE__BRONZE__MAX_OFFSETS_PER_TRIGGER": "20"}  # fmt: skip
    wait_leases_expired(s3_of(server), root)
    code, stall = run_stalled(("run", "bronze"), stalled, server, sensor_records.WRITES,
                              tmp_path / "bronze-stalled.log")  # fmt: skip
    lease = TableLease(s3_of(server), *bucket_and_prefix(root), sensor_records.NAME, "", 0)
    held = lease.current()  # the last generation it took: the renewals never came
    assert held is not None and stall.struck.is_set()
    late = [f"{at - held.expires:.1f}" for at in stall.commits if at >= held.expires]
    assert not late, f"Delta commits {', '.join(late)} s after the lease ended"
    errors = (tmp_path / "bronze-stalled.log").read_text()
    last = errors.strip().splitlines()[-1]
    assert code == 1, f"exit {code}: {errors[-2000:]}"
    assert "failed: the lease of bronze.sensor_records was last renewed " in last, last
    assert "Traceback" not in errors, errors[-2000:]

    use_s3(spark, server)
    wait_leases_expired(s3_of(server), root)
    sensor_records.run(spark, load_settings("local", environ=env))  # in this process's Spark

    rows = as_tuples(read_s3(spark, server, f"{root}/{BRONZE}").collect())
    rows += as_tuples(quarantined_rows(spark, StorageSettings(root, "", 60)))
    tally = reconcile.kafka_vs_bronze(consume_all(kafka_bootstrap, prefix), rows)
    assert tally.ok and len(rows) == sent.records, tally.line()


def test_silver_killed_at_each_moment_of_a_batch_then_restarted_gives_the_uninterrupted_result(
    spark: SparkSession, server: EmbeddedS3, tmp_path: Path
) -> None:
    env = s3_env(
        tmp_path,
        "127.0.0.1:9",
        server,
        silver__max_files_per_trigger="1",
        storage__lease_seconds=str(LEASE_SECONDS),
        # One file per batch makes many batches; validating each is tested elsewhere.
        quality__validate_streams="false",
    )
    root = env["LAKEHOUSE__STORAGE__ROOT"]
    faults = {"gap": 1, "duplicate": 1, "reorder": 1, "malformed_json": 1}
    records = kafka_records(small_spec(21, faults))
    use_s3(spark, server)
    server.start()
    # A new checkpoint's first batch takes all of bronze: the batches to strike come after.
    rng, first = random.Random(21), len(records) // 5
    write_bronze(spark, f"{root}/{BRONZE}", records[:first], 1, rng)
    # Begun and finished in this process's Spark (a CLI run costs a JVM): only the struck
    # jobs must be processes of their own.
    settings = load_settings("local", environ=env)
    reconstruct.run(spark, settings)
    assert checkpoint_format(spark, f"{root}/_checkpoints/{SILVER}") == "2"  # unique state ids
    # Each job commits one batch and is killed in the next, which its successor redoes.
    write_bronze(spark, f"{root}/{BRONZE}", records[first:], len(SILVER_MOMENTS) + 1, rng)
    for moment in SILVER_MOMENTS:
        code, _ = run_struck(("run", "silver"), env, server, moment, kill_job,
                             tmp_path / "silver.log")  # fmt: skip
        assert code == -9, f"{moment.name}: the job ended before it was killed ({code})"

    wait_leases_expired(s3_of(server), root)
    reconstruct.run(spark, settings)

    expected = reference.reconstruct(
        [(t, p, o, v) for t, p, o, _, v in records], settings.kafka.topic_prefix
    )
    assert_matches(silver_tables(spark, settings), expected)


def _keys(server: EmbeddedS3, prefix_uri: str) -> list[str]:
    bucket, _, prefix = prefix_uri.removeprefix("s3a://").partition("/")
    endpoint = server.address()
    assert endpoint is not None
    listed = server.client(endpoint).list_objects_v2(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for o in listed.get("Contents", []) if o["Key"].rsplit("/", 1)[1].isdigit()]


SHADOW_SILVER = "silver/sessions_stream__v2"
SHADOW_CATCH_UP = Moment(
    "during the Delta commit of the shadow's catch-up batch",
    r"^PUT /\S+/silver/row_changes__v2/_delta_log/0*1\.json",
)
SWAP_NAMING = Moment(
    "after the swap changed the lake's versions, before it named the new tables",
    r"^PUT /\S+/_leases/silver\.row_changes/",
    after=r"^PUT /\S+/_versions/\d+\.json$",
)
SWAP_HALF_NAMED = Moment(
    "the swap run again, once it pointed silver's names and none of gold's",
    r"^\S+ \S*gold(/|%2F)sensor_hourly__v2",  # gold's first table, after all of silver's
    after=r"^PUT /\S+/_leases/",
)


def test_a_shadow_killed_in_its_catch_up_and_a_swap_killed_half_way_lose_and_double_nothing(
    spark: SparkSession, server: EmbeddedS3, tmp_path: Path
) -> None:
    env = s3_env(
        tmp_path,
        "127.0.0.1:9",
        server,
        storage__lease_seconds=str(LEASE_SECONDS),
        quality__validate_streams="false",
    )
    root = env["LAKEHOUSE__STORAGE__ROOT"]
    records = kafka_records(small_spec(23, {"gap": 1, "duplicate": 1, "malformed_json": 1}))
    use_s3(spark, server)
    server.start()
    rng, half = random.Random(23), len(records) // 2
    write_bronze(spark, f"{root}/{BRONZE}", records[:half], 2, rng)
    settings = load_settings("local", environ=env)
    reconstruct.run(spark, settings)  # the live version, in this process's Spark
    run_models(spark, settings.storage, MODELS)
    shadow.start(settings, "silver")  # of the same code: it must compare equal
    with pytest.raises(
        LakehouseError, match=r"^v2 has no silver\.row_changes, .*gold\.sensor_hourly"
    ):
        shadow.swap(spark, settings, back=False, wait_s=0)  # its names would stay on v1

    code, _ = run_struck(("shadow", "run"), env, server, SHADOW_CATCH_UP, kill_job,
                         tmp_path / "shadow.log")  # fmt: skip
    assert code == -9, f"the shadow's run ended before it was killed ({code})"
    wait_leases_expired(s3_of(server), root)
    shadow.run_shadow(spark, at_versions(settings, shadow=True), False, {"command": "shadow run"})
    assert compare(spark, settings).equal

    live = swap_killed_at_each_step_then_finished(spark, env, server, tmp_path)

    write_bronze(spark, f"{root}/{BRONZE}", records[half:], 2, rng)
    reconstruct.run(spark, live)  # the new live version goes on from its own checkpoint
    expected = reference.reconstruct(
        [(t, p, o, v) for t, p, o, _, v in records], live.kafka.topic_prefix
    )
    assert_matches(silver_tables(spark, live), expected)


def swap_killed_at_each_step_then_finished(
    spark: SparkSession, env: dict[str, str], server: EmbeddedS3, tmp_path: Path
) -> Settings:
    """Each kill leaves `shadow status` naming the names not yet on v2 and `drop` of v1
    refused; the swap run again points every name at v2, where a late create of the
    retired v1 leaves it. The live settings."""
    settings, root = load_settings("local", environ=env), env["LAKEHOUSE__STORAGE__ROOT"]
    old, new = at_versions(settings).storage, at_versions(settings, shadow=True).storage
    made = [  # in the swap's order, silver's then gold's: a kill half way names the first
        t
        for t in (*VERSIONED["silver"], *VERSIONED["gold"])
        if t in TABLES and catalog.is_delta(spark, new.table_uri(t))
    ]
    made_old = {t for t in made if catalog.is_delta(spark, old.table_uri(t))}
    for moment, still_old in (
        (SWAP_NAMING, made),
        (SWAP_HALF_NAMED, made[made.index("gold.sensor_hourly") :]),
    ):
        code, _ = run_struck(("shadow", "swap"), env, server, moment, kill_job,
                             tmp_path / "swap.log")  # fmt: skip
        assert code == -9, f"{moment.name}: the swap ended before it was killed ({code})"
        wait_leases_expired(s3_of(server), root)
        misnamed = shadow.where(spark, settings).misnamed  # what `shadow status` says
        assert [(m.name, m.should) for m in misnamed] == [
            (t, new.table_uri(t)) for t in sorted(still_old)
        ], moment.name
        assert all(m.points_at == old.table_uri(m.name) for m in misnamed if m.name in made_old)
        with pytest.raises(
            LakehouseError,
            match=rf"^v1's tables, which drop would delete, are still named {still_old[0]}, ",
        ):
            shadow.drop(spark, settings)
    shadow.swap(spark, settings, back=False, wait_s=60)  # run again: it names the new tables
    assert shadow.names_against(spark, settings) == []
    delta.create(spark, TABLES["gold.session_summary"], old.table_uri("gold.session_summary"))
    assert {t: catalog.location_of(spark, t) for t in made} == {t: new.table_uri(t) for t in made}
    return at_versions(settings)
