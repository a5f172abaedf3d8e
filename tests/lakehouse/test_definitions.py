"""The pipeline loads, and what it lists fits together: a broken declaration fails here."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from lakehouse import PROJECT_ROOT
from lakehouse import definitions as pipeline
from lakehouse.core.settings import load_settings
from lakehouse.core.tables import columns_of
from lakehouse.runtime import incremental
from silver import reconstruct


def test_every_gold_file_declares_the_model_named_after_it() -> None:
    files = {p.stem for p in (PROJECT_ROOT / "gold").glob("*.py") if p.stem != "__init__"}
    assert {m.name for m in pipeline.MODELS} == {f"gold.{stem}" for stem in files}


def test_every_model_reads_tables_that_something_writes_and_keys_on_its_columns() -> None:
    written = {spec.name for spec in reconstruct.SILVER_TABLES} | {m.name for m in pipeline.MODELS}
    for model in pipeline.MODELS:
        assert set(model.reads) <= written, model.name
        assert set(model.key) <= set(model.table.column_names), model.name
        assert model.table.change_feed and model.table.grain.startswith("One row per")


def test_every_node_that_reads_a_table_as_it_changes_is_a_reader_compaction_checks() -> None:
    # The graph's streams and models against the readers compaction asks before VACUUM:
    # a reader missing there would find the files it has not read yet deleted. Each is
    # found where it keeps its position: a stream by its checkpoint, a model by its runs.
    graph = pipeline.graph(load_settings())
    expected = {
        (pipeline.STREAMS[n.name].checkpoint if n.kind == "stream" else n.name, table)
        for n in graph.nodes
        if n.kind in ("stream", "model")
        for table in n.reads
        if table != "kafka"
    }
    assert ("silver.sessions_stream", "bronze.sensor_records") in expected
    assert {(r.checkpoint or r.model, r.table) for r in pipeline.READERS} == expected
    assert all((r.checkpoint is None) != (r.model is None) for r in pipeline.READERS)


def test_models_are_listed_after_the_models_they_read() -> None:
    names = [m.name for m in pipeline.MODELS]
    for position, model in enumerate(pipeline.MODELS):
        assert all(names.index(r) < position for r in model.reads if r in names), names


def test_streams_name_their_checkpoints_and_what_they_read() -> None:
    assert {layer: (s.reads, s.checkpoint) for layer, s in pipeline.STREAMS.items()} == {
        "bronze": ("kafka", "bronze.sensor_records"),
        "silver": ("bronze.sensor_records", "silver.sessions_stream"),
    }


def test_column_lists_read_types_with_commas_whole() -> None:
    ddl = "a MAP<STRING, BIGINT> NOT NULL, b ARRAY<STRUCT<k: STRING, v: INT>>, c INT COMMENT 'x'"
    assert [(c.name, c.type) for c in columns_of(ddl)] == [
        ("a", "MAP<STRING, BIGINT>"),
        ("b", "ARRAY<STRUCT<k: STRING, v: INT>>"),
        ("c", "INT"),
    ]


def test_a_check_in_a_walk_reads_the_run_log_with_the_models_before_it_recorded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A walk records its models' runs in one commit, at its end: but a check binds a
    # model's reconciliation to its recorded run, so the runs before it go in first.
    recorded: list[list[str]] = []

    def record_runs(spark: Any, storage: Any, run_id: str, runs: list[Any], gate: Any) -> None:
        recorded.append([r.model for r in runs])

    monkeypatch.setattr(incremental, "record_runs", record_runs)
    checked: list[tuple[str, list[list[str]]]] = []

    class Checker:
        def check(self, table: str, since: str | None) -> None:
            checked.append((table, [list(r) for r in recorded]))

    runner = pipeline.NodeRunner(None, SimpleNamespace(storage=None))  # type: ignore[arg-type]
    runner.__dict__.update(_gold_gate=SimpleNamespace(run_id="walk"), _checker=Checker())
    with runner:
        runner.model_runs.append(incremental.ModelRun("gold.a", "full"))
        runner._check(SimpleNamespace(table="gold.a"))  # type: ignore[arg-type]
        runner.model_runs.append(incremental.ModelRun("gold.b", "full"))

    assert checked == [("gold.a", [["gold.a"]])]
    assert recorded == [["gold.a"], ["gold.b"]]  # each run once; the rest at the walk's end
