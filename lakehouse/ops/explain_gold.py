"""`explain`'s gold side: every row of each model a session feeds, and the run that last
wrote it, read from the commit's metadata, with that run's gate results."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakehouse.core.errors import explain
from lakehouse.definitions import MODELS
from lakehouse.graph.models import Model
from lakehouse.ops.lake import Lake, rows_of
from lakehouse.quality import store
from lakehouse.storage import delta
from lakehouse.storage.model_runs import RUNS

GOLD_RESULTS = store.results_table("gold").name


@dataclass
class GoldRows:
    model: str
    key: list[str]
    rows: list[dict[str, Any]]
    runs: list[dict[str, Any]] = field(default_factory=list)
    """The runs that last wrote these rows, each with its gate's results."""


def gold_rows(
    read: Lake,
    sensor: str,
    session: str,
) -> list[GoldRows]:
    """Each model's rows the session feeds: its keys from the session's silver rows (or the
    rows found for the model it reads), then the run that last wrote them."""
    found: dict[str, DataFrame] = {}
    try:
        return _gold_rows(read, sensor, session, found)
    finally:  # a command explains sessions one after another: no cache outlives its own
        for rows in found.values():
            rows.unpersist()


def _gold_rows(
    read: Lake,
    sensor: str,
    session: str,
    found: dict[str, DataFrame],
) -> list[GoldRows]:
    """`_gold`'s work; `found` gets each model's rows, cached, as they are read."""
    mine = (F.col("sensor_id") == sensor) & (F.col("session_id") == session)
    explained = []
    for model in MODELS:
        inputs = [found[name] if name in found else read(name).where(mine) for name in model.reads]
        keys = model.changed_keys(*inputs).select(*model.key).distinct()
        found[model.name] = read(model.name).join(keys, list(model.key), "left_semi").cache()
        explained.append(
            GoldRows(model.name, list(model.key), rows_of(found[model.name], model.key))
        )
    fed = [(g, m) for g, m in zip(explained, MODELS, strict=True) if g.rows]
    calls: list[Callable[[], Any]] = [lambda: read(RUNS.name).collect()]
    calls += [partial(_writing_runs, read, m, found[m.name], len(g.rows)) for g, m in fed]
    runs, *writers = delta.side_by_side(calls)
    named = {run_id for ids in writers if not isinstance(ids, str) for run_id in ids}
    gates = _gates(read, named)
    for (g, _), ids in zip(fed, writers, strict=True):
        if isinstance(ids, str):
            g.runs = [{"note": ids}]
            continue
        written = sorted(
            (r for r in runs if r.model == g.model and r.run_id in ids),
            key=lambda r: r.started_at,
        )
        g.runs = [_run_entry(r, gates) for r in written]
        if unnamed := ids.get(None):
            g.runs.append(
                {"note": f"{unnamed} of its last commits name no run (made before gold's "
                         "commits named their runs)"}
            )  # fmt: skip
        elif not written:
            g.runs = [{"note": f"no run in {RUNS.name} of those its last commits name"}]
    return explained


def _run_entry(run: Any, gates: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A run of `gold.model_runs` with its gate's results for the model."""
    return {
        "run_id": run.run_id,
        "mode": run.mode,
        "started_at": run.started_at,
        "rows_written": run.rows_written,
        "gate": [
            {k: v for k, v in gate.items() if k not in ("table_name", "run_id")}
            for gate in gates
            if gate["run_id"] == run.run_id and gate["table_name"] == run.model
        ],
    }


def _writing_runs(
    read: Lake, model: Model, rows: DataFrame, count: int
) -> Counter[str | None] | str:
    """The runs that last wrote `rows` (`count` of them), each with how many of those
    commits name it. The model's change feed gives each row's last commit, read back from
    the latest version over more versions until every row is found (so that the cost
    follows the rows' age, not the table's history); a commit names its run in its
    metadata (`delta.commits_naming`)."""
    uri = read.settings.storage.table_uri(model.name)
    latest = delta.latest(read.spark, uri).version
    span = 8
    while True:
        start = max(0, latest - span + 1)
        try:
            commits = (
                read.changes(model.name, start)
                .where(F.col("_change_type").isin("insert", "update_postimage"))
                .join(rows.select(*model.key), list(model.key), "left_semi")
                .groupBy(*model.key)
                .agg(F.max("_commit_version").alias("version"))
                .collect()
            )
        except Exception as error:  # vacuumed files: Delta says "change data gone" its ways
            return f"the change feed from version {start} is not readable: {explain(error)}"
        if len(commits) >= count or start == 0:
            break
        span *= 4
    versions = sorted({c.version for c in commits})
    named = delta.commit_metadata(read.spark, uri, versions)
    return Counter(named.get(v) for v in versions)


def _gates(read: Lake, run_ids: set[str | None]) -> list[dict[str, Any]]:
    """Gold's gate results of the runs `run_ids`."""
    ids = sorted(i for i in run_ids if i is not None)
    if not ids:
        return []
    columns = ("table_name", "run_id", "expectation", "severity", "success",
               "unexpected_count")  # fmt: skip
    found = read(GOLD_RESULTS).where(F.col("run_id").isin(ids)).select(*columns)
    return rows_of(found, ("expectation",))
