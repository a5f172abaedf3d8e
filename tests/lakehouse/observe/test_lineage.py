"""OpenLineage events of a walk, without Spark: each held against OpenLineage's JSON schema,
each naming what the manifest says its node reads and writes."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from openlineage.client.event_v2 import RunState
from openlineage.client.serde import Serde

from lakehouse import definitions as pipeline
from lakehouse.core.settings import LineageSettings, load_settings
from lakehouse.graph.nodes import Node
from lakehouse.observe import lineage
from lakehouse.runtime.walk import Done, observed
from tests.support import lineage_events
from tests.support.openlineage_spec import problems

SETTINGS = load_settings("local")
MANIFEST = pipeline.manifest(SETTINGS, pipeline.graph(SETTINGS))
KAFKA = ("kafka://127.0.0.1:9092", SETTINGS.kafka.topic_pattern)
PARENT = ("build", "0192a8e4-7d3c-7a4e-9d1e-3f0c1b2a4d5e")
NOT_NULL = lineage.Assertion(
    "sensor_id_not_null", "expect_column_values_to_not_be_null", False, "fail", "sensor_id",
    "unexpected 3",
)  # fmt: skip


def event(node: str, state: RunState = RunState.COMPLETE, **facts: object) -> dict:
    made = lineage.node_event(
        state,
        namespace="lakehouse",
        node=node,
        run_id="0192a8e4-7d3c-7a4e-9d1e-3f0c1b2a4d60",
        parent=PARENT,
        manifest=MANIFEST,
        kafka=KAFKA if "kafka" in MANIFEST["nodes"][node]["reads"] else None,
        **facts,  # type: ignore[arg-type]
    )
    return json.loads(Serde.to_json(made))


@pytest.mark.parametrize("node", sorted(MANIFEST["nodes"]))
def test_every_nodes_events_hold_to_the_spec_and_name_what_the_manifest_says(node: str) -> None:
    entry, tables = MANIFEST["nodes"][node], MANIFEST["tables"]
    started = event(node, RunState.START)
    completed = event(
        node,
        column_sources={"sensor_id": [(entry["reads"][0], "sensor_id")]},
        assertions=(NOT_NULL,),
    )
    failed = event(node, RunState.FAIL, error="boom", stack="Traceback ...")
    for each in (started, completed, failed):
        assert problems(each) == []
        assert each["job"] == {
            "namespace": "lakehouse",
            "name": node,
            "facets": each["job"]["facets"],
        }
        assert each["run"]["facets"]["parent"]["run"]["runId"] == PARENT[1]
        places = {t: lineage.dataset(tables[t]["location"]) for t in tables} | {"kafka": KAFKA}
        assert [(d["namespace"], d["name"]) for d in each["inputs"]] == [
            places[t] for t in entry["reads"]
        ]
        assert [(d["namespace"], d["name"]) for d in each["outputs"]] == [
            places[t] for t in entry["writes"]
        ]
    for dataset in completed["inputs"] + completed["outputs"]:
        if dataset["name"] != KAFKA[1]:
            schema = dataset["facets"]["schema"]["fields"]
            table = next(t for t in tables if places[t][1] == dataset["name"])
            assert [f["name"] for f in schema] == [c["name"] for c in tables[table]["columns"]]
    assert failed["eventType"] == "FAIL"
    assert failed["run"]["facets"]["errorMessage"]["message"] == "boom"


def test_datasets_are_named_as_openlineages_naming_spec_names_them() -> None:
    assert lineage.dataset("s3a://lake/prefix/gold/sensor_daily") == (
        "s3://lake",
        "prefix/gold/sensor_daily",
    )
    assert lineage.dataset("file:/srv/lake/silver/sessions") == (
        "file",
        "/srv/lake/silver/sessions",
    )
    assert lineage.dataset("file:///srv/lake/bronze/x") == ("file", "/srv/lake/bronze/x")
    assert lineage.kafka_dataset("b1:9092,b2:9093", "^s\\.x$") == ("kafka://b1:9092", "^s\\.x$")


def test_a_models_output_carries_its_column_lineage_and_a_checks_table_its_assertions() -> None:
    hourly = event(
        "gold.sensor_hourly",
        column_sources={"hour": [("silver.row_changes", "event_time")]},
    )
    (output,) = hourly["outputs"]
    (source,) = output["facets"]["columnLineage"]["fields"]["hour"]["inputFields"]
    assert (source["name"], source["field"]) == (
        lineage.dataset(MANIFEST["tables"]["silver.row_changes"]["location"])[1],
        "event_time",
    )
    checked = event("check:silver.sessions", assertions=(NOT_NULL,))
    first, *others = checked["inputs"]
    (assertion,) = first["inputFacets"]["dataQualityAssertions"]["assertions"]
    assert assertion == {
        "assertion": "expect_column_values_to_not_be_null",
        "success": False,
        "column": "sensor_id",
        "severity": "fail",
        "name": "sensor_id_not_null",
        "actual": "unexpected 3",
        "params": {},
    }
    assert all("dataQualityAssertions" not in d.get("inputFacets", {}) for d in others)


def test_the_schema_check_finds_what_the_spec_refuses() -> None:
    broken = event("silver")
    del broken["job"]["name"]
    broken["run"]["runId"] = "not a uuid"
    broken["outputs"][0]["facets"]["schema"]["fields"] = [{"type": "STRING"}]
    found = problems(broken)
    assert any("'name' is a required property" in p for p in found)
    assert any("not a uuid" in p for p in found)
    assert any(p.startswith("outputs[") and "'name' is a required property" in p for p in found)


def test_a_walk_sends_start_then_complete_or_fail_with_the_failed_assertion(
    tmp_path: Path,
) -> None:
    sent = lineage.LineageEvents(
        LineageSettings("file", "", "lakehouse"), tmp_path, MANIFEST, "check"
    )
    nodes = {n: Node(n, "check", "silver", ("silver.sessions",)) for n in MANIFEST["nodes"]}

    def run_node(node: Node) -> Done:
        if node.name == "gold.sensor_daily":
            raise RuntimeError("the model broke")
        return Done("error", failures=1, message="not null", assertions=(NOT_NULL,))

    run = observed(run_node, sent)
    run(nodes["check:silver.sessions"])
    with pytest.raises(RuntimeError):
        run(nodes["gold.sensor_daily"])
    events = lineage_events(tmp_path)
    assert [(e["eventType"], e["job"]["name"]) for e in events] == [
        ("START", "check:silver.sessions"),
        ("FAIL", "check:silver.sessions"),
        ("START", "gold.sensor_daily"),
        ("FAIL", "gold.sensor_daily"),
    ]
    assert all(problems(e) == [] for e in events)
    assert len({e["run"]["runId"] for e in events}) == 2
    (assertion,) = events[1]["inputs"][0]["inputFacets"]["dataQualityAssertions"]["assertions"]
    assert (assertion["name"], assertion["success"]) == ("sensor_id_not_null", False)
    assert events[1]["run"]["facets"]["errorMessage"]["message"] == "not null"
    error = events[3]["run"]["facets"]["errorMessage"]
    assert "the model broke" in error["message"] and "RuntimeError" in error["stackTrace"]


def test_a_collector_that_does_not_answer_costs_a_warning_not_the_walk(
    capsys: pytest.CaptureFixture[str],
) -> None:
    gone = LineageSettings("http", "http://127.0.0.1:9", "lakehouse")
    sent = lineage.LineageEvents(gone, Path("."), MANIFEST, "build")
    run_id = sent.start("silver")
    sent.end("silver", run_id)
    assert capsys.readouterr().out.count("warning: lineage events not sent") == 1


def test_http_sends_each_event_to_the_collectors_lineage_endpoint() -> None:
    received: list[tuple[str, dict]] = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, json.loads(body)))
            self.send_response(201)
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        sent = lineage.LineageEvents(
            LineageSettings("http", url, "lakehouse"), Path("."), MANIFEST, "run"
        )
        sent.end("gold.sensor_daily", sent.start("gold.sensor_daily"))
    finally:
        server.shutdown()
    assert [(path, e["eventType"]) for path, e in received] == [
        ("/api/v1/lineage", "START"),
        ("/api/v1/lineage", "COMPLETE"),
    ]
    assert all(problems(e) == [] for _, e in received)


def test_column_lineage_goes_with_a_model_run_that_wrote_rows_only(tmp_path: Path) -> None:
    asked: list[str] = []

    def sources(node: str) -> lineage.ColumnSources:
        asked.append(node)
        return {"day": [("gold.sensor_hourly", "hour")]}

    settings = LineageSettings("file", "", "lakehouse")
    sent = lineage.LineageEvents(settings, tmp_path, MANIFEST, "run", column_sources=sources)
    daily = Node("gold.sensor_daily", "model", "gold", ("gold.sensor_hourly",), ())
    for written in (0, 24):
        observed(lambda _, n=written: Done(rows_written=n), sent)(daily)
    completes = [e for e in lineage_events(tmp_path) if e["eventType"] == "COMPLETE"]
    assert ["columnLineage" in e["outputs"][0]["facets"] for e in completes] == [False, True]
    assert asked == ["gold.sensor_daily"]
