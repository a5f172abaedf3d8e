"""`lakehouse compact`: OPTIMIZE, clustering and VACUUM over the tables of the lake.

Streams commit a few files per micro-batch and gold MERGEs rewrite a few more each run,
so tables collect small files that every query has to open. OPTIMIZE bin-packs them (on
the clustered gold tables it also clusters rows by their query keys); it commits with
`dataChange = false`, so the streams and gold's change feed reading these tables skip it.
VACUUM then deletes the files no version within the retention still names. A reader that
lags further behind than the retention would find the files of the versions it has not
read yet gone, so the retention is checked against every incremental reader first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyspark.sql import SparkSession

from lakehouse.core.console import duration, echo, size
from lakehouse.core.errors import LakehouseError, explain
from lakehouse.core.settings import Settings
from lakehouse.storage import catalog, delta, lease
from lakehouse.storage.delta import retry_on_conflict
from lakehouse.storage.positions import Reader, reader_lags


@dataclass(frozen=True)
class Footprint:
    files: int
    bytes: int

    def __str__(self) -> str:
        return f"{self.files:,} files {size(self.bytes)}"


@dataclass(frozen=True)
class Compaction:
    """One table before and after: the files its current version names, and storage."""

    table: str
    snapshot_before: Footprint
    snapshot_after: Footprint
    storage_before: Footprint
    storage_after: Footprint

    def describe(self) -> str:
        return (
            f"{self.table:<28} table {self.snapshot_before} -> {self.snapshot_after};  "
            f"on storage {self.storage_before} -> {self.storage_after}"
        )


def compact(
    spark: SparkSession,
    settings: Settings,
    readers: Sequence[Reader],
    select: Sequence[str] = (),
    retention_hours: float | None = None,
    vacuum: bool = True,
    echo: Callable[[str], None] = echo,
) -> list[Compaction]:
    """Compact the selected tables (all of the lake by default), checking VACUUM's
    retention against the lag of every one of `readers` before anything is changed."""
    tables = catalog.lake_tables(spark, settings.storage.root)
    if unknown := [t for t in select if t not in tables]:
        raise LakehouseError(
            f"no table {', '.join(unknown)} under {settings.storage.root} "
            f"(tables: {', '.join(sorted(tables))})"
        )
    chosen = {name: tables[name] for name in (select or sorted(tables))}
    hours = settings.compact.vacuum_retention_hours if retention_hours is None else retention_hours
    if vacuum:
        check_retention(spark, settings, readers, chosen, hours)
        _allow_vacuum(spark, settings)
    # On S3 compaction is one more writer: it takes every table's lease first, so that a
    # table a stream is writing is refused before anything changes.
    with lease.holding(settings, list(chosen), "lakehouse compact"):
        return [
            _compact(spark, name, location, hours, vacuum, echo)
            for name, location in chosen.items()
        ]


def between_batches(
    spark: SparkSession, settings: Settings, tables: Sequence[str], readers: Sequence[Reader]
) -> Callable[[int, lease.Held], None]:
    """A stream's own compaction, run after the writes of every
    `compact.stream_every_batches`-th batch: OPTIMIZE and VACUUM of the tables it writes.

    On S3 the stream is the one writer of its tables (it holds their leases), so this is
    how they get compacted while it runs. It runs inside the batch, after its writes,
    and is best effort: a failure is a line, not a failed batch (the batch would fail
    again on every restart), except a lost lease, which must stop the writer. VACUUM is
    skipped, with a line, while a reader lags beyond the retention.
    """
    every = settings.compact.stream_every_batches
    hours = settings.compact.vacuum_retention_hours

    def after_batch(batch_id: int, held: lease.Held) -> None:
        if every <= 0 or (batch_id + 1) % every:
            return
        # A table that no batch has created yet (e.g. a quarantine never needed) is skipped.
        uris = {
            name: uri
            for name in tables
            if catalog.is_delta(spark, uri := settings.storage.table_uri(name))
        }
        try:
            check_retention(spark, settings, readers, uris, hours)
            _allow_vacuum(spark, settings)
            vacuum = True
        except LakehouseError as lagging:
            echo(f"compacting without VACUUM: {lagging}")
            vacuum = False
        for name, uri in uris.items():
            held.check()  # renewed in the background: lost meanwhile, nothing more is written
            try:
                _compact(spark, name, uri, hours, vacuum, echo)
            except Exception as error:
                echo(f"{name}: not compacted this time: {explain(error)}")

    return after_batch


def _allow_vacuum(spark: SparkSession, settings: Settings) -> None:
    # Delta's own check refuses anything under 7 days, not knowing the readers;
    # check_retention does, and its floor keeps the files of writes still in flight.
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    # Delta 4.4 otherwise ignores any RETAIN but 0 hours and applies the table's
    # delta.deletedFileRetentionDuration (7 days by default), with a warning: the retention
    # the reader-lag check guards must be the one VACUUM applies. (A table property would
    # do the same, but setting it is a metadata commit that fails a stream writing there.)
    spark.conf.set("spark.databricks.delta.vacuum.retentionWindowIgnore.enabled", "false")
    # VACUUM lists storage with this many tasks, 10,000 by default: one per core will do.
    spark.conf.set(
        "spark.sql.sources.parallelPartitionDiscovery.parallelism",
        str(settings.spark.shuffle_partitions),
    )


def _compact(
    spark: SparkSession,
    name: str,
    location: str,
    hours: float,
    vacuum: bool,
    echo: Callable[[str], None],
) -> Compaction:
    """OPTIMIZE, then VACUUM, one table; its files and bytes before and after."""
    echo(f"{name}: compacting ...")
    table, stored = snapshot(spark, location), storage(spark, location)
    # A table without files has nothing to bin-pack; storage holding no more data files
    # than the table names holds none that VACUUM could delete. A stream compacting its
    # tables every few batches mostly meets such tables: no job for them.
    optimized = table.files > 0
    if optimized:
        optimize = f"OPTIMIZE delta.`{location}`"
        retry_on_conflict(lambda: spark.sql(optimize), name)
    vacuumed = vacuum and (optimized or stored.files > table.files)
    if vacuumed:
        spark.sql(f"VACUUM delta.`{location}` RETAIN {hours} HOURS")
    result = Compaction(
        name,
        table,
        snapshot(spark, location) if optimized else table,
        stored,
        storage(spark, location) if optimized or vacuumed else stored,
    )
    echo(f"  {result.describe()}")
    return result


def check_retention(
    spark: SparkSession,
    settings: Settings,
    readers: Sequence[Reader],
    tables: dict[str, str],
    hours: float,
) -> None:
    """Refuse, before anything changes, a retention that a reader's lag or the floor beats."""
    if hours < settings.compact.min_retention_hours:
        raise LakehouseError(
            f"refusing to VACUUM with a retention of {hours:g} hours: below "
            f"compact.min_retention_hours ({settings.compact.min_retention_hours:g}), "
            "which protects the files of writes still in flight"
        )
    lags = reader_lags(spark, settings, readers, tables)
    for table, table_lags in lags.items():
        slowest = max(table_lags, key=lambda lag: lag.seconds)
        if slowest.seconds > 0 and slowest.seconds >= hours * 3600:
            raise LakehouseError(
                f"refusing to VACUUM {table} with a retention of {hours:g} hours: "
                f"{slowest.reader} has not read its versions from {slowest.next_version} on, "
                f"committed {duration(slowest.seconds)} ago, and would lose them. Run it "
                f"first, or retain more than {slowest.seconds / 3600:.2f} hours "
                "(--retention-hours); nothing was compacted"
            )


def snapshot(spark: SparkSession, location: str) -> Footprint:
    """The files the table's current version names, from its log."""
    found = delta.latest(spark, location)
    return Footprint(found.files, found.size_bytes)


def storage(spark: SparkSession, location: str) -> Footprint:
    """The data files the table keeps on storage, for its current version and older ones
    (its log, which every commit lengthens, not counted)."""
    fs, path = catalog.hadoop_fs(spark, location)
    total, log = fs.getContentSummary(path), fs.getContentSummary(path.suffix("/_delta_log"))
    return Footprint(
        int(total.getFileCount() - log.getFileCount()), int(total.getLength() - log.getLength())
    )
