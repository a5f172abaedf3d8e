"""`lakehouse explain`'s pure parts, without Spark: where a session's records are, and
how an explanation reads when bronze does not hold them exactly once."""

from __future__ import annotations

import json
from pathlib import Path

from lakehouse.cli.explain_text import text, violation
from lakehouse.ops.explain import Explanation, KafkaRecords, _coordinates, session_named
from lakehouse.report.explain_page import write_explain_page


def records(**changed: object) -> KafkaRecords:
    fields = dict(
        topic="sensors.s1", partition=2, first_offset=10, last_offset=40, records=5,
        first_timestamp="2026-01-01T00:00:00", last_timestamp="2026-01-01T00:01:00",
        in_bronze=4, in_quarantine=1, held_twice=[], in_kafka=5, missing=[],
    )  # fmt: skip
    return KafkaRecords(**{**fields, **changed})  # type: ignore[arg-type]


def explained(kafka: KafkaRecords) -> Explanation:
    return Explanation(
        "s1", "a", None, [kafka], None, [], {}, 0, None,
        {"oldest_offset": None, "newest_offset": None, "records": 0}, [],
    )  # fmt: skip


def test_a_sessions_records_span_what_silver_saw_of_it_per_partition() -> None:
    session = {"first_topic": "t", "first_partition": 1, "first_offset": 10,
               "topic": "t", "partition": 1, "offset": 90}  # fmt: skip
    violations = [{"topic": "t", "partition": 1, "offset": 95}, {"topic": None, "partition": None,
                  "offset": None}]  # fmt: skip
    changes = [("t", 1, 12), ("t", 1, 80), ("u", 0, 7)]
    assert _coordinates(session, violations, changes) == {("t", 1): (10, 95), ("u", 0): (7, 7)}
    assert _coordinates(None, [], []) == {}


def test_records_held_twice_or_missing_are_named_and_not_exactly_once() -> None:
    assert records().exactly_once
    twice = explained(records(held_twice=[12]))
    missing = explained(records(missing=[13, 14], in_bronze=2))
    for found, line in ((twice, "held more than once: offsets 12"),
                        (missing, "in Kafka, not in bronze: offsets 13, 14")):  # fmt: skip
        assert not found.kafka[0].exactly_once
        assert json.loads(found.to_json())["kafka"][0]["exactly_once"] is False
        lines = text(found)
        assert any(x.startswith("  bronze holds them NOT exactly once:") for x in lines)
        assert f"  {line}" in lines


def test_a_record_is_the_session_its_value_names_as_silver_reads_it() -> None:
    assert session_named(b'{"session_id": "b", "seq": 3}') == "b"
    assert session_named(b'{"session_id": "b"') is None  # not JSON: names none
    assert session_named(b'{"session_id": 7}') is None
    assert session_named(b"[1]") is None
    assert session_named(None) is None


def test_the_page_says_what_bronze_holds_twice(tmp_path: Path) -> None:
    page = write_explain_page(tmp_path, explained(records(held_twice=[12])).to_dict())
    shown = page.read_text()
    assert "NOT exactly once" in shown and "twice: 12" in shown
    assert "2026-01-01 00:00:00 .. 2026-01-01 00:01:00" in shown
    assert page.name in (tmp_path / "explain" / "index.html").read_text()


def test_a_violation_says_what_it_found_once_and_no_seq_it_did_not_expect() -> None:
    def found(expected: int | None, seq: int | None, detail: str | None) -> str:
        return violation({"expected_seq": expected, "found_seq": seq, "detail": detail})

    # A gap's detail is the seqs themselves: said once, not twice.
    assert found(519, 520, "expected seq 519, found 520") == "expected seq 519, found 520"
    # A record quarantined while the session waits for a snapshot expected no seq.
    assert found(None, 521, "waiting for a snapshot") == "seq 521; waiting for a snapshot"
    assert found(7, None, "no seq") == "expected seq 7, found no readable seq; no seq"
    assert found(None, None, None) == "no readable seq"
