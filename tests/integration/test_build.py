"""`lakehouse build` end to end through the CLI, with a real broker, Spark, Delta and GX:
one graph of nodes run and checked in order, selection, run_results.json and manifest."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from lakehouse import PROJECT_ROOT
from lakehouse.core.settings import Settings
from lakehouse.ops.producer import TrafficSpec, generate_traffic, produce
from tests.support import foreign_lines, lineage_events, overrides, run_lakehouse, settings_for
from tests.support.browser import render
from tests.support.openlineage_spec import problems

pytestmark = pytest.mark.integration

PREFIX = "build.sensors."
SPEC = TrafficSpec(
    seed=31,
    sensors=2,
    sessions_per_sensor=2,
    rows_per_snapshot=10,
    updates_per_session=30,
    partitions=2,
    topic_prefix=PREFIX,
)
NODES = [
    "bronze",
    "check:bronze.sensor_records",
    "silver",
    "check:silver.row_changes",
    "check:silver.session_rows",
    "check:silver.sessions",
    "check:silver.violations",
    "gold.sensor_hourly",
    "gold.session_summary",
    "check:gold.sensor_hourly",
    "gold.sensor_daily",
    "check:gold.sensor_daily",
    "check:gold.session_summary",
]


def results_of(state: Path) -> dict[str, dict[str, Any]]:
    document = json.loads((state / "run_results.json").read_text())
    return {r["unique_id"]: r for r in document["results"]}


@pytest.fixture(scope="module")
def built(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, str], Settings, Any]:
    """Traffic in Kafka, then one `lakehouse build` of the whole pipeline."""
    root = tmp_path_factory.mktemp("build")
    produce(SPEC, kafka_bootstrap)
    env = overrides(root, kafka_bootstrap, PREFIX)
    result = run_lakehouse("build", env=env, timeout=600)
    return env, settings_for(root, kafka_bootstrap, PREFIX), result


def test_a_clean_build_runs_and_checks_every_node_in_order_and_records_it(
    built: tuple[dict[str, str], Settings, Any], spark: SparkSession
) -> None:
    _, settings, result = built
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "build: success=13" in result.stdout
    state = settings.storage.local_state_dir
    results = results_of(state)
    assert list(results) == NODES
    assert {r["status"] for r in results.values()} == {"success"}
    sent = sum(1 for _ in generate_traffic(SPEC))  # by the producer
    assert results["bronze"]["rows_read"] == sent
    assert results["gold.sensor_hourly"]["rows_written"] > 0
    assert results["check:gold.sensor_hourly"]["failures"] == 0
    # the gate ran on each model's rows before it wrote them: results of mode `run`
    gated = spark.read.format("delta").load(
        settings.storage.table_uri("quality.gold_expectation_results")
    )
    assert {r.table_name for r in gated.select("table_name").distinct().collect()} == {
        "gold.sensor_hourly",
        "gold.sensor_daily",
        "gold.session_summary",
    }
    assert gated.where("NOT success").count() == 0
    # the manifest: dependencies, and every column documented, as DESCRIBE shows it
    manifest = json.loads((state / "manifest.json").read_text())
    daily = manifest["nodes"]["gold.sensor_daily"]
    assert daily["depends_on"] == ["check:gold.sensor_hourly", "gold.sensor_hourly"]
    columns = manifest["tables"]["gold.sensor_hourly"]["columns"]
    assert all(c["description"] for c in columns), columns
    assert manifest["tables"]["gold.sensor_hourly"]["suite"]["inputs"] == [
        "gold.quarantine",
        "silver.row_changes",
    ]
    described = {r.col_name: r.comment for r in spark.sql("DESCRIBE gold.sensor_hourly").collect()}
    assert described["updates"] == next(c["description"] for c in columns if c["name"] == "updates")
    assert (state / "runs").is_dir() and len(list((state / "runs").iterdir())) == 1
    # every node left its progress: each stream's batches, each model's run, each check
    rows = [
        row
        for writer in ("bronze", "silver", "gold", "check")
        for row in spark.read.format("delta")
        .load(settings.storage.table_uri(f"ops.{writer}_progress"))
        .collect()
    ]
    assert {r.node for r in rows} == set(NODES)
    assert all(r.status == "success" for r in rows)
    # Each stream's batches add up to what the producer sent: silver reads every record
    # bronze holds, once.
    streamed = {n: sum(r.input_rows for r in rows if r.node == n) for n in ("bronze", "silver")}
    assert streamed == {"bronze": sent, "silver": sent}
    assert results["silver"]["rows_read"] == sent
    hourly = next(r for r in rows if r.node == "gold.sensor_hourly")
    assert hourly.rows_written == {
        "gold.sensor_hourly": results["gold.sensor_hourly"]["rows_written"]
    }
    assert not foreign_lines(result.stdout + result.stderr), result.stdout + result.stderr


def test_a_walk_records_its_models_results_and_runs_together_before_their_checks(
    built: tuple[dict[str, str], Settings, Any], spark: SparkSession
) -> None:
    _, settings, _ = built

    def table(name: str) -> DataFrame:
        return spark.read.format("delta").load(settings.storage.table_uri(name))

    runs, gated = table("gold.model_runs").collect(), table("quality.gold_expectation_results")
    assert sorted(r.model for r in runs) == sorted(n for n in NODES if n.startswith("gold."))
    assert {r.run_id for r in runs} == {r.run_id for r in gated.collect()}
    # Recorded before the first check after them, which binds its reconciliation to the
    # recorded run: the two models before `check:gold.sensor_hourly` in one commit, the
    # third at the walk's end; not a commit a model.
    for name in ("quality.gold_expectation_results", "gold.model_runs"):
        history = DeltaTable.forPath(spark, settings.storage.table_uri(name)).history()
        assert history.where("operation = 'WRITE'").count() == 2, name


def test_the_report_documents_every_table_and_plots_progress_over_time(
    built: tuple[dict[str, str], Settings, Any], tmp_path: Path
) -> None:
    env, _, _ = built
    report = run_lakehouse("report", env=env, timeout=300)
    assert report.returncode == 0, report.stderr[-3000:]
    (line,) = [x for x in report.stdout.splitlines() if x.startswith("tables, columns")]
    page = Path(line.split(": ", 1)[1])
    text = page.read_text()
    assert text.count("<rect ") == len(NODES)  # one box per node of the graph
    for name in ("bronze.sensor_records", "silver.sessions", "gold.sensor_daily"):
        assert f"<h2 id='{name}'>" in text
    assert "sessions_active" in text and "distinct sessions of the sensor" in text
    assert "updates_reconcile_with_silver" in text and "FAILED" not in text
    assert "href='tables.html'" in (page.parent / "index.html").read_text()

    # the plots page, as a browser opens it: every image there, a PNG with something drawn
    (line,) = [x for x in report.stdout.splitlines() if x.startswith("progress over time")]
    plots = Path(line.split(": ", 1)[1])
    dom = render(plots.as_uri(), tmp_path / "plots.png")
    images = re.findall(r'<img[^>]* src="([^"]+)"', dom)
    assert len(images) == 6, dom[:3000]
    for src in images:
        drawn = (plots.parent / src).read_bytes()
        assert drawn.startswith(b"\x89PNG\r\n\x1a\n") and len(drawn) > 5000, src
    assert "href='plots.html'" in (page.parent / "index.html").read_text()
    assert not foreign_lines(report.stdout + report.stderr), report.stdout + report.stderr


def test_ls_and_a_dry_run_print_the_plan_and_run_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    env = overrides(tmp_path, kafka_bootstrap, "build.dry.")
    # What each selector selects of the pipeline's graph: tests/lakehouse/graph/test_graph.py.
    selection = ("+sensor_daily", "--exclude", "layer:bronze", "type:check")
    listed = run_lakehouse("ls", "--select", *selection, env=env, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[1] for line in listed.stdout.splitlines()] == [
        "silver",
        "gold.sensor_hourly",
        "gold.sensor_daily",
    ]

    dry = run_lakehouse("build", "--dry-run", "--select", "silver+", env=env, timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert "build would run 11 nodes:" in dry.stdout
    assert "check  check:silver.sessions            after silver" in dry.stdout
    assert not (tmp_path / "lake").exists() and not (tmp_path / "state").exists()

    wrong = run_lakehouse("ls", "--select", "sensor_weekly", env=env, timeout=60)
    assert wrong.returncode == 1
    assert wrong.stderr.startswith("lakehouse: error: selector 'sensor_weekly' names no node")


def test_a_selected_build_runs_the_selection_and_its_checks_only(
    built: tuple[dict[str, str], Settings, Any],
) -> None:
    env, settings, _ = built
    result = run_lakehouse("build", "--select", "sensor_hourly+", env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    results = results_of(settings.storage.local_state_dir)
    assert list(results) == [
        "gold.sensor_hourly",
        "check:gold.sensor_hourly",
        "gold.sensor_daily",
        "check:gold.sensor_daily",
    ]
    assert results["gold.sensor_hourly"]["message"].startswith("unchanged")


def test_a_failing_fail_check_skips_what_is_downstream_and_lets_other_branches_go_on(
    built: tuple[dict[str, str], Settings, Any], tmp_path: Path
) -> None:
    env, settings, _ = built
    suites = tmp_path / "expectations"
    shutil.copytree(PROJECT_ROOT / "expectations", suites)
    sessions = suites / "silver" / "sessions.json"
    suite = json.loads(sessions.read_text())
    suite["expectations"].append(
        {
            "name": "no_session_has_records",
            "severity": "fail",
            "in_stream": False,
            "type": "expect_column_values_to_be_between",
            "kwargs": {"column": "records", "max_value": 0},
        }
    )
    sessions.write_text(json.dumps(suite))
    result = run_lakehouse(
        "build", env={**env, "LAKEHOUSE__QUALITY__SUITES": str(suites)}, timeout=600
    )

    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    statuses = {k: r["status"] for k, r in results_of(settings.storage.local_state_dir).items()}
    assert statuses["bronze"] == statuses["silver"] == "success"
    assert statuses["check:silver.sessions"] == "error"
    # what reads silver.sessions waits for its check: skipped, with everything after it
    assert statuses["gold.session_summary"] == statuses["check:gold.session_summary"] == "skipped"
    # gold.sensor_hourly reads silver.row_changes, whose check passed: it goes on
    assert statuses["gold.sensor_hourly"] == statuses["gold.sensor_daily"] == "success"
    message = results_of(settings.storage.local_state_dir)["check:silver.sessions"]["message"]
    assert "no_session_has_records (fail)" in message
    assert "build: success=10 error=1 skipped=2" in result.stdout
    # its lineage: FAIL with the assertion that failed; what was skipped never ran
    events = lineage_events(settings.storage.local_state_dir)
    walk = events[-1]["run"]["facets"]["parent"]["run"]["runId"]
    this = [e for e in events if e["run"]["facets"]["parent"]["run"]["runId"] == walk]
    assert [problem for e in this for problem in problems(e)] == []
    (failed,) = [e for e in this if e["eventType"] == "FAIL"]
    assert failed["job"]["name"] == "check:silver.sessions"
    assertions = failed["inputs"][0]["inputFacets"]["dataQualityAssertions"]["assertions"]
    assert [a["name"] for a in assertions if not a["success"]] == ["no_session_has_records"]
    assert {e["job"]["name"] for e in this}.isdisjoint(
        {"gold.session_summary", "check:gold.session_summary"}
    )
