"""`lakehouse explain` end to end: sessions of the demo's generator, made clean, gapped and
resynced, broken, and reused by a second sensor, sent to a real broker and built by
`lakehouse build`; each explanation held against what Kafka holds, an independent
reconstruction of silver, and gold's tables."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse import definitions as pipeline
from lakehouse.core.settings import Settings
from lakehouse.gameday.reference import ROW_FIELDS, reconstruct, session_of
from lakehouse.ops import explain
from lakehouse.ops.producer import Record, TrafficSpec, create_topics, generate_traffic
from tests.support import overrides, run_lakehouse, settings_for
from tests.support.browser import render
from tests.support.kafka import consume_all

pytestmark = pytest.mark.integration

PREFIX = "explain.sensors."
SPEC = TrafficSpec(
    seed=43,
    sensors=2,
    sessions_per_sensor=3,
    rows_per_snapshot=8,
    updates_per_session=40,
    resync_every=15,
    partitions=2,
    topic_prefix=PREFIX,
    start_time=datetime(2026, 3, 1, 10, 50, tzinfo=UTC),
)


def at(record: Record) -> tuple[str, int]:
    """A generated record's (session id, seq)."""
    message = json.loads(record.value)
    return message["session_id"], message["seq"]


def traffic() -> tuple[list[Record], dict[str, tuple[str, str]]]:
    """The generator's sessions, and what each test session is: (sensor, session id)."""
    records = list(generate_traffic(SPEC))
    by_session: dict[str, list[Record]] = defaultdict(list)
    for record in records:
        by_session[json.loads(record.value)["session_id"]].append(record)
    clean, gapped, broken = sorted(s for s in by_session if s.startswith("sensor-001"))
    seqs = {s: [json.loads(r.value)["seq"] for r in rs] for s, rs in by_session.items()}
    # A record sent without its key: bronze's suite quarantines it, so silver finds a gap
    # that the next resync heals. A record never sent after the last resync: never healed.
    keyless, dropped = (gapped, 5), (broken, max(seqs[broken]) - 3)
    kept = [replace(r, key=None) if at(r) == keyless else r for r in records if at(r) != dropped]
    # The clean session's id, sent again by sensor-002 as its own session.
    other = f"{PREFIX}sensor-002"
    reused = [
        Record(other, r.partition, r.key, r.value.replace(b'"sensor-001"', b'"sensor-002"'), r.kind)
        for r in by_session[clean]
    ]
    named = {
        "clean": ("sensor-001", clean),
        "gap and resync": ("sensor-001", gapped),
        "broken": ("sensor-001", broken),
        "reused id": ("sensor-002", clean),
    }
    return kept + reused, named


ExplainedLake = tuple[Settings, dict[str, tuple[str, str]], dict[str, dict[str, Any]], Any]
"""The lake's settings, the four sessions by case, their explanations by
`sensor/session`, and the explain command's run."""


def as_json(value: Any) -> Any:
    """`value` as `explain --json` prints it: times as text, tuples as lists."""
    return json.loads(json.dumps(value, default=str))


@pytest.fixture(scope="module")
def explained(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> ExplainedLake:
    """The traffic in Kafka, one `lakehouse build`, then one `lakehouse explain` of the
    four sessions."""
    root = tmp_path_factory.mktemp("explain")
    records, named = traffic()
    create_topics(kafka_bootstrap, sorted({r.topic for r in records}), SPEC.partitions, {})
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for r in records:
        producer.produce(r.topic, r.value, r.key, r.partition)
    assert producer.flush(30) == 0
    env = overrides(root, kafka_bootstrap, PREFIX)
    built = run_lakehouse("build", env=env, timeout=600)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    asked = [f"{sensor}/{session}" for sensor, session in named.values()]
    result = run_lakehouse("explain", *asked, "--rows", "--json", env=env, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    found = {f"{e['sensor']}/{e['session']}": e for e in json.loads(result.stdout)}
    return settings_for(root, kafka_bootstrap, PREFIX), named, found, result


@pytest.mark.parametrize("case", ["clean", "gap and resync", "broken", "reused id"])
def test_explain_tells_what_kafka_holds_and_how_silver_rebuilt_it(
    explained: ExplainedLake,
    kafka_bootstrap: str,
    case: str,
) -> None:
    _, named, found, _ = explained
    sensor, session = named[case]
    e = found[f"{sensor}/{session}"]
    # the session's records: those on its sensor's topic whose value names it
    mine = sorted(
        (topic, partition, offset, key, value)
        for topic, partition, offset, key, value, _ in consume_all(kafka_bootstrap, PREFIX)
        if session_of(value) == session and topic == f"{PREFIX}{sensor}"
    )
    (kafka,) = e["kafka"]
    assert (kafka["topic"], kafka["partition"]) == mine[0][:2]
    assert (kafka["first_offset"], kafka["last_offset"]) == (mine[0][2], mine[-1][2])
    assert kafka["records"] == kafka["in_kafka"] == len(mine)
    keyless = sum(1 for *_, key, _ in mine if key is None)  # bronze's suite quarantines them
    assert (kafka["in_bronze"], kafka["in_quarantine"]) == (len(mine) - keyless, keyless)
    assert keyless == (case == "gap and resync") and kafka["exactly_once"]
    assert kafka["held_twice"] == kafka["missing"] == []
    # silver, against a reconstruction of its own from the records bronze kept
    sent = [(t, p, o, v) for t, p, o, key, v in mine if key is not None]
    expected = reconstruct(sent, PREFIX)
    summary = dict(expected.sessions)[(sent[0][0], session)]
    row = e["session_row"]
    assert (row["status"], row["records"], row["rejected"], e["rows_now"]) == (
        summary.status, summary.records, summary.rejected, summary.table_rows,
    )  # fmt: skip
    assert (summary.status, summary.rejected > 0) == {
        "clean": ("closed", False),
        "gap and resync": ("closed", True),
        "broken": ("broken", True),
        "reused id": ("closed", False),
    }[case]
    assert sorted((v["reason"], v["offset"]) for v in e["violations"]) == sorted(
        (reason, offset) for (_, reason, _, _, offset), _ in expected.violations
    )
    assert e["transitions"] is None  # silver ran without --trace
    # each row now, with the record it came from: (values..., seq, offset)
    rows_now = {
        r["row_id"]: (*(r[f] for f in ROW_FIELDS), r["seq"], r["offset"]) for r in e["rows"]
    }
    assert rows_now == {row: (*v[:-3], v[-1]) for (_, row), v in expected.rows}


def test_explain_finds_every_gold_row_a_session_feeds_and_the_run_that_wrote_it(
    explained: ExplainedLake,
    spark: SparkSession,
) -> None:
    settings, named, found, _ = explained
    gold = {m.name: spark.read.format("delta").load(settings.storage.table_uri(m.name))
            for m in pipeline.MODELS}  # fmt: skip
    runs = spark.read.format("delta").load(settings.storage.table_uri("gold.model_runs"))
    changes = spark.read.format("delta").load(settings.storage.table_uri("silver.row_changes"))
    for sensor, session in named.values():
        e = found[f"{sensor}/{session}"]
        by_model = {g["model"]: g for g in e["gold"]}
        mine = (F.col("sensor_id") == sensor) & (F.col("session_id") == session)
        hours = changes.where(mine).select(F.date_trunc("hour", "event_time").alias("hour"))
        keys = {
            "gold.session_summary": [(sensor, session)],
            "gold.sensor_hourly": sorted({(sensor, r.hour) for r in hours.collect()}),
            "gold.sensor_daily": sorted({(sensor, r.hour.date()) for r in hours.collect()}),
        }
        for model, wanted in keys.items():
            key = by_model[model]["key"]
            assert [[r[k] for k in key] for r in by_model[model]["rows"]] == as_json(wanted)
            rows = gold[model].join(spark.createDataFrame(wanted, key), key, "left_semi")
            assert by_model[model]["rows"] == as_json(
                sorted((r.asDict() for r in rows.collect()), key=lambda r: [r[k] for k in key])
            )
            (run,) = by_model[model]["runs"]
            assert (
                runs.where((F.col("run_id") == run["run_id"]) & (F.col("model") == model)).count()
                == 1
            )
            assert run["gate"] and all(r["success"] for r in run["gate"])


def test_a_record_names_its_session_and_a_reused_id_stays_with_its_sensor(
    explained: ExplainedLake,
    spark: SparkSession,
) -> None:
    settings, named, found, _ = explained
    sensor, session = named["reused id"]
    kafka = found[f"{sensor}/{session}"]["kafka"][0]
    assert explain.session_of_record(
        spark,
        settings,
        kafka["topic"],
        kafka["partition"],
        kafka["last_offset"],
    )[:2] == (sensor, session)
    first = found[f"sensor-001/{session}"]
    assert {k["topic"] for k in first["kafka"]} == {f"{PREFIX}sensor-001"}
    assert {k["topic"] for k in found[f"{sensor}/{session}"]["kafka"]} == {f"{PREFIX}sensor-002"}
    (mine,) = [
        g for g in found[f"{sensor}/{session}"]["gold"] if g["model"] == "gold.session_summary"
    ]
    assert [r["sensor_id"] for r in mine["rows"]] == ["sensor-002"]


def test_the_page_of_an_explained_session_shows_its_path_through_the_layers(
    explained: ExplainedLake,
    tmp_path: Path,
) -> None:
    settings, named, _, _ = explained
    sensor, session = named["broken"]
    folder = settings.quality.site_dir / "explain"
    (page,) = [p for p in folder.glob("*.html") if session in p.name and sensor in p.name]
    dom = render(page.as_uri(), tmp_path / "explain.png")
    for shown in (f"Session {session} of {sensor}", "Kafka and bronze", "silver", "gold",
                  "broken", "each exactly once", "Violations (", "gap"):  # fmt: skip
        assert shown in dom, shown
    index = render((folder / "index.html").as_uri(), tmp_path / "index.png")
    assert index.count("<li><a href=") == len(named)
