"""The report's page of plots: what the streams, gold's runs and the checks did over time,
from the progress tables (lakehouse/observe/progress.py), drawn to PNG files at report time.

Static images beside a plain HTML page, by relative paths: nothing to fetch and no script,
so it renders wherever the Data Docs are opened (a file:// URL too) or published. The
Data Docs index links to it. Reading is Spark's; everything from the frames on is pandas
and matplotlib, testable without Spark.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import reduce
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import dates
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.core.settings import Settings, StorageSettings
from lakehouse.observe.progress import read_progress
from lakehouse.report.data_docs import link_from_index
from lakehouse.storage import catalog

PAGE = "plots.html"
IMAGES = "plots"
"""The folder of the page's images, beside it in the site."""
USED_COLUMNS = (
    "run_id",
    "node",
    "kind",
    "batch_id",
    "started_at",
    "duration_ms",
    "input_rows_per_second",
    "processed_rows_per_second",
    "kafka_offsets_behind",
    "quarantined_rows",
    "violations",
)
"""The progress columns the plots use."""
NEWEST_COLUMNS = ("node", "batch_id", "newest")
"""Per stream batch that wrote records: the newest Kafka timestamp among them."""
_TIME = "time (UTC), at each batch's or run's end"


@dataclass(frozen=True)
class Plot:
    """One image: points with columns `at` (time), `value`, `line` (its legend label) and
    `segment` (points drawn as one unbroken line: a line is broken between runs, so that
    it never spans the time a stream was stopped)."""

    file: str
    title: str
    ylabel: str
    caption: str
    points: pd.DataFrame
    steps: bool = False
    """Running totals: drawn as steps, since a total holds until the next batch."""


def write_plots_page(
    site: Path,
    spark: SparkSession,
    settings: Settings,
    records: str,
    lineage: Sequence[str],
) -> Path:
    """Read the progress and the newest Kafka timestamps per stream batch (of `records`,
    bronze's table, and of the silver tables in `lineage`), write the page into the Data
    Docs `site` and link it from the index; its path."""
    found = read_progress(spark, settings.storage)
    if found is None:
        progress = pd.DataFrame(columns=USED_COLUMNS)
        newest = pd.DataFrame(columns=NEWEST_COLUMNS)
    else:
        progress = found.select(*USED_COLUMNS).toPandas()
        newest = newest_kafka_timestamps(spark, settings.storage, records, lineage)
    return render_plots_page(site, progress, newest, datetime.now(UTC))


def newest_kafka_timestamps(
    spark: SparkSession, storage: StorageSettings, records: str, lineage: Sequence[str]
) -> pd.DataFrame:
    """One row per stream batch that wrote records: the stream (bronze, silver), its batch
    id and the newest Kafka timestamp of those records. Silver's rows carry the lineage of
    their record, not its timestamp: the record at the highest offset of each partition
    that a batch wrote a row change or violation for is looked up in bronze."""
    bronze_path = storage.table_uri(records)
    if not catalog.is_delta(spark, bronze_path):
        return pd.DataFrame(columns=NEWEST_COLUMNS)
    bronze = spark.read.format("delta").load(bronze_path)
    found = [
        bronze.groupBy("batch_id")
        .agg(F.max("kafka_timestamp").alias("newest"))
        .select(F.lit("bronze").alias("node"), "batch_id", "newest")
    ]
    carried = [
        spark.read.format("delta").load(uri).select("batch_id", "topic", "partition", "offset")
        for uri in (storage.table_uri(t) for t in lineage)
        if catalog.is_delta(spark, uri)
    ]
    if carried:
        # The last offset per partition, rather than every record, keeps the join with
        # bronze to one row per batch and partition.
        last = (
            reduce(DataFrame.unionByName, carried)
            .groupBy("batch_id", "topic", "partition")
            .agg(F.max("offset").alias("offset"))
        )
        found.append(
            last.join(
                bronze.select("topic", "partition", "offset", "kafka_timestamp"),
                ["topic", "partition", "offset"],
            )
            .groupBy("batch_id")
            .agg(F.max("kafka_timestamp").alias("newest"))
            .select(F.lit("silver").alias("node"), "batch_id", "newest")
        )
    return reduce(DataFrame.unionByName, found).toPandas()


def render_plots_page(
    site: Path, progress: pd.DataFrame, newest: pd.DataFrame, now: datetime
) -> Path:
    """Write the page and its images into `site` and link it from the index; its path.
    `progress`: rows of the progress tables (USED_COLUMNS); `newest`: NEWEST_COLUMNS."""
    folder = site / IMAGES
    folder.mkdir(parents=True, exist_ok=True)
    # Images of an earlier report would otherwise be published with the site, unlinked.
    for stale in folder.glob("*.png"):
        stale.unlink()
    if progress.empty:
        body = (
            "<p class='none'>No progress recorded yet. The plots appear once a stream "
            "(<code>lakehouse run bronze</code>), <code>lakehouse build</code>, a gold run or a "
            "check has recorded its progress in <code>ops.progress</code>.</p>"
        )
    else:
        figures = []
        for plot in plots(progress, newest):
            draw(plot, folder / plot.file)
            figures.append(
                f"<figure><img src='{IMAGES}/{plot.file}' alt='{html.escape(plot.title)}'>"
                f"<figcaption>{html.escape(plot.caption)}</figcaption></figure>"
            )
        body = f"<p>{html.escape(_extent(progress))}</p>{''.join(figures)}"
    page = site / PAGE
    page.write_text(
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Progress over time</title>"
        "<style>body{font-family:sans-serif;margin:2em;max-width:70em}figure{margin:2em 0}"
        "img{max-width:100%;border:1px solid #e5e7eb}figcaption{color:#374151;margin-top:.3em}"
        ".none{font-size:1.2em}code{background:#f3f4f6}</style></head><body>"
        "<p><a href='index.html'>Data Docs</a></p><h1>Progress over time</h1>"
        f"{body}<p><small>Drawn {now:%Y-%m-%d %H:%M:%S} UTC.</small></p></body></html>"
    )
    link_from_index(site, PAGE, "Progress over time: rates, Kafka lag, durations, freshness")
    return page


_ABOUT = {
    "rates.png": (
        "Input and processing rate",
        "rows per second",
        "Per stream batch: the rate rows arrived since the batch before, and the rate the "
        "batch processed them; processing below input for long means falling behind.",
    ),
    "kafka_lag.png": (
        "Kafka lag",
        "offsets behind latest (records)",
        "At each bronze batch's end: the offsets between where it had read to and the "
        "latest in Kafka, summed over every topic and partition.",
    ),
    "batch_duration.png": (
        "Batch duration",
        "seconds",
        "Per stream batch: its whole trigger, from its start to its commit.",
    ),
    "quarantined_rows.png": (
        "Quarantined rows",
        "rows (running total)",
        "Rows each writer's quality gate diverted to its layer's quarantine, added up over "
        "its batches and runs since progress was first recorded.",
    ),
    "violations.png": (
        "Protocol violations by reason",
        "violations (running total)",
        "Records silver rejected, by reason (docs/protocol.md), added up over its batches "
        "since progress was first recorded.",
    ),
    "freshness.png": (
        "Freshness",
        "age of the newest data (seconds)",
        "At each stream batch's end: that end minus the newest Kafka timestamp among the "
        "records it wrote (silver's: the last record per partition it wrote a row change "
        "or violation for, found in bronze). Between batches the data ages unseen.",
    ),
}
"""Each plot's title, axis and caption, by its file, in the page's order."""


def plots(progress: pd.DataFrame, newest: pd.DataFrame) -> list[Plot]:
    """The page's plots, in its order."""
    rows = _ended(progress)
    streams = rows[rows["kind"] == "stream"]
    rates = pd.concat(
        [
            _points(streams, streams["input_rows_per_second"], streams["node"] + " input"),
            _points(streams, streams["processed_rows_per_second"], streams["node"] + " processed"),
        ]
    )
    lag = _points(streams, streams["kafka_offsets_behind"].map(_total), streams["node"])
    seconds = pd.to_numeric(streams["duration_ms"]) / 1000
    quarantining = rows[rows["quarantined_rows"].notna()]
    quarantined = _running_totals(
        quarantining["at"],
        quarantining["node"],
        pd.to_numeric(quarantining["quarantined_rows"]).groupby(quarantining["node"]).cumsum(),
    )
    frames = {
        "rates.png": rates,
        "kafka_lag.png": lag,
        "batch_duration.png": _points(streams, seconds, streams["node"]),
        "quarantined_rows.png": quarantined,
        "violations.png": _violations(rows),
        "freshness.png": freshness(progress, newest),
    }
    running = ("quarantined_rows.png", "violations.png")
    return [Plot(f, *_ABOUT[f], frame, steps=f in running) for f, frame in frames.items()]


def freshness(progress: pd.DataFrame, newest: pd.DataFrame) -> pd.DataFrame:
    """Per stream batch with a newest Kafka timestamp: its end minus that timestamp, in
    seconds, as points (see `Plot`)."""
    rows = _ended(progress)
    streams = rows[rows["kind"] == "stream"].astype({"batch_id": "int64"})
    # A new checkpoint numbers its batches from 0 again, and a failed batch is retried
    # under its id: the latest row of an id is the batch whose records the tables hold.
    latest = streams.sort_values("started_at").drop_duplicates(["node", "batch_id"], keep="last")
    joined = latest.merge(
        newest.astype({"batch_id": "int64", "newest": "datetime64[ns]"}),
        on=["node", "batch_id"],
        validate="one_to_one",
    ).sort_values("at")
    return _points(joined, (joined["at"] - joined["newest"]).dt.total_seconds(), joined["node"])


def draw(plot: Plot, path: Path) -> None:
    """Render `plot` to a PNG file at `path`."""
    figure = Figure(figsize=(10, 3.6), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    end = plot.points["at"].max()
    for number, (label, line) in enumerate(plot.points.groupby("line", sort=True)):
        for index, (_, segment) in enumerate(line.groupby("segment", sort=False)):
            at, value = segment["at"].to_numpy(), segment["value"].to_numpy()
            if plot.steps:  # a total holds until the latest time drawn
                at, value = np.append(at, end.to_datetime64()), np.append(value, value[-1])
            axes.plot(
                at,
                value,
                color=f"C{number % 10}",
                marker="" if plot.steps else ".",
                drawstyle="steps-post" if plot.steps else "default",
                label=label if index == 0 else "_nolegend_",
            )
    if plot.points.empty:
        axes.text(0.5, 0.5, "none recorded", transform=axes.transAxes, ha="center")
        axes.set_xticks([])
        axes.set_yticks([])
    else:
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
        locator = dates.AutoDateLocator()
        axes.xaxis.set_major_locator(locator)
        axes.xaxis.set_major_formatter(dates.ConciseDateFormatter(locator))
        values = plot.points["value"]
        if (values % 1 == 0).all():  # counts: no ticks between whole numbers
            axes.yaxis.set_major_locator(MaxNLocator(integer=True))
        # From 0, so that heights compare; below it only for a value that is (a freshness
        # below 0: a producer's clock ahead of the driver's).
        axes.set_ylim(min(values.min() * 1.1, 0), max(values.max() * 1.1, 1))
    axes.set_title(plot.title)
    axes.set_xlabel(_TIME)
    axes.set_ylabel(plot.ylabel)
    axes.grid(alpha=0.3)
    figure.savefig(path, dpi=100)


def _ended(progress: pd.DataFrame) -> pd.DataFrame:
    """The rows in time order, with when each ended (`at`)."""
    rows = progress.assign(started_at=pd.to_datetime(progress["started_at"]))
    took = pd.to_timedelta(pd.to_numeric(rows["duration_ms"]).fillna(0), unit="ms")
    return rows.assign(at=rows["started_at"] + took).sort_values("at", kind="stable")


def _points(rows: pd.DataFrame, values: pd.Series, line: pd.Series) -> pd.DataFrame:
    """Points of `values` at the rows' ends, one line per label, broken between runs."""
    points = pd.DataFrame(
        {"at": rows["at"], "value": pd.to_numeric(values), "line": line, "segment": rows["run_id"]}
    )
    return points.dropna(subset=["value"])


def _running_totals(at: pd.Series, line: pd.Series, totals: pd.Series) -> pd.DataFrame:
    """Points of running totals, one unbroken line per label; none for a total of 0."""
    points = pd.DataFrame({"at": at, "value": totals, "line": line, "segment": line})
    return points[points.groupby("line")["value"].transform("max") > 0]


def _violations(rows: pd.DataFrame) -> pd.DataFrame:
    """Running totals per reason, over the rows that counted violations (silver's): a
    reason a batch did not find adds 0 there."""
    counting = rows[rows["violations"].map(_is_map)]
    counts = pd.DataFrame(
        [dict(v) for v in counting["violations"]], index=counting.index, dtype="float64"
    )
    totals = counts.fillna(0).cumsum().assign(at=counting["at"])
    long = totals.melt(id_vars="at", var_name="line", value_name="value")
    return _running_totals(long["at"], long["line"], long["value"])


def _total(offsets: Any) -> float | None:
    return float(sum(dict(offsets).values())) if _is_map(offsets) else None


def _is_map(value: Any) -> bool:
    """A map column's value: a dict, or pairs (pandas through Arrow); not null (None, NaN)."""
    return isinstance(value, Mapping | list)


def _extent(progress: pd.DataFrame) -> str:
    kinds = progress["kind"].value_counts()
    started = pd.to_datetime(progress["started_at"])
    return (
        f"{kinds.get('stream', 0):,} stream batches, {kinds.get('model', 0):,} gold model runs "
        f"and {kinds.get('check', 0):,} checks recorded, from {started.min():%Y-%m-%d %H:%M} to "
        f"{started.max():%Y-%m-%d %H:%M} UTC."
    )
