"""The pure parts of seeing the pipeline run: a progress row from Spark's progress, the
metrics it feeds, Kafka lag, commit metrics and freshness levels."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from lakehouse.core.console import duration, size
from lakehouse.core.settings import FreshnessRule, KafkaLagRule, StallRule
from lakehouse.observe import metrics
from lakehouse.observe.progress import Recorder, batch_row
from lakehouse.ops.status import (
    Freshness,
    PartitionLag,
    PipelineStatus,
    Stall,
    StreamState,
    changed_rows,
    kafka_lag,
    level_of,
    lines,
    stalls,
    topic_lags,
    with_times,
)
from lakehouse.runtime.walk import NodeResult, node_row
from lakehouse.storage.delta import Txn

# As Spark's StreamingQueryProgress.json has it for a Kafka source with a state operator.
PROGRESS = {
    "id": "q-1",
    "runId": "r-1",
    "name": "bronze.sensor_records",
    "timestamp": "2026-11-26T03:00:00.000Z",
    "batchId": 7,
    "numInputRows": 120,
    "inputRowsPerSecond": 40.0,
    "processedRowsPerSecond": "NaN",
    "durationMs": {"addBatch": 900, "latestOffset": 20, "triggerExecution": 1500},
    "eventTime": {"watermark": "2026-11-26T02:55:00.000Z"},
    "stateOperators": [
        {"numRowsTotal": 10, "memoryUsedBytes": 1000},
        {"numRowsTotal": 5, "memoryUsedBytes": 24},
    ],
    "sources": [
        {
            "description": "KafkaV2[SubscribePattern[sensors.*]]",
            "startOffset": {"sensors.a": {"0": 0, "1": 0}},
            "endOffset": {"sensors.a": {"0": 60, "1": 60}},
            "latestOffset": {"sensors.a": {"0": 75, "1": 60}},
            "numInputRows": 120,
        }
    ],
}


def test_a_progress_row_carries_spark_figures_and_the_notes_of_its_batch() -> None:
    notes = {"rows_written": {"bronze.sensor_records": 118}, "quarantined_rows": 2}
    row = batch_row(PROGRESS, "bronze", notes)
    assert row["batch_id"] == 7 and row["input_rows"] == 120
    assert row["started_at"] == datetime(2026, 11, 26, 3, tzinfo=UTC)
    assert row["duration_ms"] == 1500 and row["durations_ms"]["addBatch"] == 900
    assert row["processed_rows_per_second"] is None  # NaN: unknown, not a number
    assert row["kafka_offsets_behind"] == {"sensors.a/0": 15, "sensors.a/1": 0}
    assert (row["state_rows"], row["state_memory_bytes"]) == (15, 1024)
    assert row["watermark"] == datetime(2026, 11, 26, 2, 55, tzinfo=UTC)
    assert row["rows_written"] == {"bronze.sensor_records": 118}
    assert row["quarantined_rows"] == 2 and row["violations"] is None


def test_offsets_given_as_json_text_are_read_too_and_a_delta_source_has_no_kafka_lag() -> None:
    kafka = {**PROGRESS["sources"][0]}  # type: ignore[dict-item]
    kafka["endOffset"] = '{"sensors.a": {"0": 70}}'
    kafka["latestOffset"] = '{"sensors.a": {"0": 75}}'
    delta = {"endOffset": {"reservoirVersion": 3, "index": -1}, "latestOffset": None}
    row = batch_row({**PROGRESS, "sources": [kafka, delta]}, "bronze", {})
    assert row["kafka_offsets_behind"] == {"sensors.a/0": 5}


class _Event:
    def __init__(self, progress: dict[str, object]) -> None:
        import json

        self.progress = type("P", (), {"json": json.dumps(progress)})()


def test_the_recorder_keeps_executed_batches_of_followed_queries_with_their_notes() -> None:
    recorder = Recorder()
    recorder.follow("q-1", "bronze")
    recorder.note(Txn("q-1", 7), rows_written={"t": 3}, quarantined_rows=1)
    recorder.note(Txn("q-1", 7), rows_written={"t": 2}, violations={"gap": 1})
    recorder.onQueryProgress(_Event(PROGRESS))
    idle = {**PROGRESS, "batchId": 8, "durationMs": {"triggerExecution": 3}}
    recorder.onQueryProgress(_Event(idle))  # an idle trigger ran no batch
    recorder.onQueryProgress(_Event({**PROGRESS, "id": "other"}))  # not followed
    (row,) = recorder.take("q-1")
    assert row["rows_written"] == {"t": 5} and row["quarantined_rows"] == 1
    assert row["violations"] == {"gap": 1}
    assert recorder.take("q-1") == [] and recorder.take("other") == []


def test_metrics_count_what_the_rows_say() -> None:
    row = batch_row({**PROGRESS, "id": "q-m"}, "metrics-test", {"rows_written": {"t": 4}})
    before = metrics.INPUT_ROWS.labels("metrics-test")._value.get()
    metrics.observe(row)
    metrics.observe({**row, "batch_id": 8})
    assert metrics.INPUT_ROWS.labels("metrics-test")._value.get() == before + 240
    assert metrics.LAST_BATCH.labels("metrics-test")._value.get() == 8
    assert metrics.KAFKA_BEHIND.labels("sensors.a", "0")._value.get() == 15
    assert metrics.ROWS_WRITTEN.labels("metrics-test", "t")._value.get() == 8


def test_kafka_lag_counts_from_where_bronze_stands_or_from_the_earliest_offset() -> None:
    ends = {("s.a", 0): (0, 100), ("s.a", 1): (0, 40), ("s.b", 0): (30, 50)}
    lags = kafka_lag(ends, {("s.a", 0): 90, ("s.a", 1): 40})
    assert [(p.topic, p.partition, p.lag, p.read_to) for p in lags] == [
        ("s.a", 0, 10, 90),
        ("s.a", 1, 0, 40),
        ("s.b", 0, 20, None),  # never read: retention already took 0..29
    ]


def test_changed_rows_reads_each_operation_and_counts_nothing_for_compaction() -> None:
    assert changed_rows("STREAMING UPDATE", {"numOutputRows": "12"}) == 12
    assert changed_rows("WRITE", {"numOutputRows": "5"}) == 5
    merged = {"numTargetRowsInserted": "2", "numTargetRowsUpdated": "3", "numOutputRows": "9"}
    assert changed_rows("MERGE", merged) == 5
    assert changed_rows("OPTIMIZE", {"numOutputRows": "100"}) == 0
    assert changed_rows("VACUUM END", {}) == 0


def test_freshness_levels_and_the_exit_code_of_the_worst() -> None:
    rule = FreshnessRule("bronze.sensor_records", "kafka_timestamp", 60, 600)
    assert [level_of(age, rule) for age in (0, 60, 61, 600, 601)] == [
        "ok",
        "ok",
        "warn",
        "warn",
        "error",
    ]
    assert PipelineStatus().exit_code == 0
    assert PipelineStatus(kafka_error="Kafka at x unreachable").exit_code == 2


def test_the_jobs_own_count_of_input_rows_wins_and_scales_the_rates() -> None:
    # A gate that judged the batch in three passes made Spark count each record thrice.
    thrice = {**PROGRESS, "numInputRows": 360, "inputRowsPerSecond": 120.0}
    row = batch_row({**thrice, "processedRowsPerSecond": 90.0}, "bronze", {"input_rows": 120})
    assert row["input_rows"] == 120
    assert row["input_rows_per_second"] == 40.0 and row["processed_rows_per_second"] == 30.0


def test_a_model_run_or_check_is_recorded_as_its_walk_result_says() -> None:
    ran = NodeResult(
        "gold.sensor_hourly", "model", "warn", "2026-11-26T03:00:00.000+00:00",
        "2026-11-26T03:00:02.500+00:00", 2.5, rows_written=40, quarantined=2,
        message="incremental, 2 rows quarantined",
    )  # fmt: skip
    row = node_row(ran)
    assert row["started_at"] == datetime(2026, 11, 26, 3, tzinfo=UTC)
    assert (row["duration_ms"], row["status"]) == (2500, "warn")
    assert row["rows_written"] == {"gold.sensor_hourly": 40} and row["quarantined_rows"] == 2
    checked = NodeResult(
        "check:silver.sessions", "check", "error", ran.started_at, "", 1.0,
        rows_read=9, failures=1, message="x (fail): unexpected 1\nmore",
    )  # fmt: skip
    row = node_row(checked)
    assert (row["input_rows"], row["rows_written"]) == (9, None)
    assert row["message"] == "x (fail): unexpected 1"


def test_spans_and_sizes_read_as_a_person_reads_them() -> None:
    assert [duration(s) for s in (41, 3 * 3600 + 300, 2 * 86400 + 4 * 3600)] == [
        "0m 41s",
        "3h 05m",
        "2d 4h",
    ]
    assert [size(n) for n in (812, 3.25 * 2**20)] == ["812 B", "3.2 MiB"]


def test_status_lists_the_kafka_changes_accepted_with_who_and_when() -> None:
    accepted = {
        "change": "offsets_lost",
        "topic": "sensors.a",
        "partition": 0,
        "skipped_from": 120,
        "skipped_to": 239,
        "resumed_at": 240,
        "incarnation": 1,
        "bronze_batch": 9,
        "accepted_by": "ops",
        "accepted_at": datetime(2026, 11, 26, 3, 0, tzinfo=UTC),
        "reason": "retention ran out over the weekend",
    }
    said = lines(PipelineStatus(kafka_changes=[accepted]))
    assert (
        "  batch 9: offsets_lost     sensors.a/0: skipped offsets 120..239, reads from 240, "
        "by ops at 2026-11-26 03:00:00: retention ran out over the weekend"
    ) in said
    # Accepted changes are a record, not a fault: the level stays ok.
    assert PipelineStatus(kafka_changes=[accepted]).exit_code == 0


NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
LAG_RULE = KafkaLagRule(warn_records=100, error_records=1000, warn_seconds=60, error_seconds=600)


def lagging(topic: str, partition: int, lag: int, waited_s: float | None) -> PartitionLag:
    oldest = None if waited_s is None else NOW - timedelta(seconds=waited_s)
    return PartitionLag(topic, partition, 5000, 5000 - lag, lag, oldest)


def test_kafka_lag_per_topic_is_judged_by_records_and_by_how_long_the_oldest_waited() -> None:
    lags = [
        lagging("s.calm", 0, 0, None),
        lagging("s.calm", 1, 50, 10),
        lagging("s.many", 0, 600, 5),
        lagging("s.many", 1, 600, 20),  # 1,200 records in all: past error_records
        lagging("s.old", 0, 3, 61),  # few records, but the oldest waited past warn_seconds
        lagging("s.old", 1, 0, None),
    ]

    topics = {t.topic: t for t in topic_lags(lags, LAG_RULE, NOW)}

    assert {name: (t.lag, t.level) for name, t in topics.items()} == {
        "s.calm": (50, "ok"),
        "s.many": (1200, "error"),
        "s.old": (3, "warn"),
    }
    assert topics["s.many"].seconds_behind == 20.0
    assert [(p.partition, p.lag) for p in topics["s.old"].lagging] == [(0, 3)]
    assert topics["s.old"].partitions == 2


def test_the_oldest_unread_record_times_its_partition_and_none_is_no_wait() -> None:
    (read, unread) = kafka_lag({("s.a", 0): (0, 10), ("s.a", 1): (0, 10)}, {("s.a", 0): 10})
    timed = with_times([read, unread], {("s.a", 1): NOW - timedelta(seconds=30)})
    (topic,) = topic_lags(timed, LAG_RULE, NOW)
    assert unread.next_offset == 0 and topic.seconds_behind == 30.0 and topic.lag == 10


def state(node: str, seconds_ago: float) -> StreamState:
    ended = NOW - timedelta(seconds=seconds_ago)
    return StreamState(node, 3, ended, seconds_ago, 10, 1.0, 1.0, 1.0, None, None)


def test_a_stream_stalls_only_while_its_input_waits_and_never_having_run_warns() -> None:
    rule = StallRule(warn_after_seconds=60, error_after_seconds=600)
    streams = [state("bronze", 30), state("silver", 120), state("gold", 9999)]
    waiting = {"bronze": "5 Kafka records", "silver": "40 rows of bronze.sensor_records"}

    found = stalls(streams, {**waiting, "late": "1 Kafka records"}, rule)

    # bronze ran 30 s ago (fine); gold is idle with nothing waiting (fine)
    assert found == [
        Stall("late", "1 Kafka records", None, "warn"),
        Stall("silver", "40 rows of bronze.sensor_records", 120, "warn"),
    ]
    assert [s.level for s in stalls([state("silver", 601)], {"silver": "1 row"}, rule)] == ["error"]


def test_the_exit_code_is_the_worst_of_lag_stalls_and_freshness() -> None:
    (warned,) = topic_lags([lagging("s.a", 0, 200, 1)], LAG_RULE, NOW)
    fresh = Freshness("bronze.sensor_records", "kafka_timestamp", NOW, 1.0, "ok")
    stall = Stall("silver", "40 rows of bronze.sensor_records", 900, "error")
    assert PipelineStatus(freshness=[fresh]).exit_code == 0
    assert PipelineStatus(topics=[warned], freshness=[fresh]).exit_code == 1
    assert PipelineStatus(topics=[warned], stalls=[stall], freshness=[fresh]).exit_code == 2


def test_status_shows_a_line_per_topic_and_the_partitions_behind_or_all_when_asked() -> None:
    lags = [lagging("s.a", 0, 0, None), lagging("s.a", 1, 200, 90), lagging("s.b", 0, 0, None)]
    found = PipelineStatus(kafka=lags, topics=topic_lags(lags, LAG_RULE, NOW))

    short, every = lines(found), lines(found, partitions=True)

    kafka = short[short.index("kafka lag (bronze behind the broker): 200 records") + 1 :]
    assert kafka[:3] == [
        "  WARN  s.a                                 200 records, the oldest waiting 1m 30s "
        "(1 of 2 partitions behind)",
        "          1           200  (end 5,000, read to 4,800)",
        "  OK    s.b                                   0 records (0 of 1 partitions behind)",
    ]
    assert "          0             0  (end 5,000, read to 5,000)" in every
    assert len(every) == len(short) + 2
