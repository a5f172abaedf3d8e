"""Every Delta write: table creation from a spec, idempotent appends, MERGE, conflict retries.

Streams write through `foreachBatch`, which alone is at-least-once: a batch that wrote but
did not commit its offsets runs again after a crash. Writing under the batch's `Txn`
makes Delta skip the replay, which is what makes the sinks exactly-once.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from functools import partial, reduce
from typing import Any, TypeVar

from delta.exceptions import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    ConcurrentWriteException,
    DeltaConcurrentModificationException,
    MetadataChangedException,
    ProtocolChangedException,
)
from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.core.console import echo
from lakehouse.core.errors import LakehouseError, first_line
from lakehouse.core.tables import TableSpec
from lakehouse.storage import catalog
from lakehouse.storage import versions as stored

T = TypeVar("T")

CONFLICTS = (
    DeltaConcurrentModificationException,
    ConcurrentWriteException,
    MetadataChangedException,
    ProtocolChangedException,
    ConcurrentAppendException,
    ConcurrentDeleteReadException,
    ConcurrentDeleteDeleteException,
    ConcurrentTransactionException,
)
"""Delta refused a commit because another one changed what it had read; it wrote nothing."""


@dataclass(frozen=True)
class Txn:
    """Delta's idempotent-write key for one micro-batch: (query id, batch id).

    The query id is stable for a checkpoint and new for a new one, so a fresh checkpoint
    never collides with old writes.
    """

    app_id: str
    version: int

    @property
    def rebuilds(self) -> bool:
        """A checkpoint's first batch: the stream's first after a new checkpoint, which
        replaces its tables rather than adding to them, so that a rebuild never leaves a
        row twice."""
        return self.version == 0


def stamped(frame: DataFrame, *values: tuple[str, str, Any]) -> DataFrame:
    """`frame` with a column for each (name, SQL type, value): what changes from one batch to
    the next (its id, its instant), added last.

    As literals, though a literal is compiled into the batch's generated code, which the next
    batch cannot reuse: a one-row frame of them joined in instead costs a broadcast per write,
    which measured dearer than the compile (`python -m benchmarks.batch_values`)."""
    return frame.select("*", *(F.lit(v).cast(t).alias(name) for name, t, v in values))


def create(spark: SparkSession, spec: TableSpec, location: str) -> None:
    """Create the table of `spec` at `location` unless it exists, and name it in the catalog.

    Properties are also set on a table that exists without them, so that a property
    added to a spec (the change data feed) reaches tables made before it.
    """
    properties = spec.table_properties
    if not catalog.is_delta(spark, location):
        _create_table(spark, spec, location)
        if not has_commit(spark, location):
            _first_commit_aside(spark, spec, location)
        if not has_commit(spark, location):
            raise LakehouseError(
                f"{spec.name}: creating the table at {location} left no commit in its "
                "_delta_log folder"
            )
    else:
        held = _properties(spark, location)
        if missing := {k: v for k, v in properties.items() if held.get(k) != v}:
            spark.sql(f"ALTER TABLE delta.`{location}` SET TBLPROPERTIES ({_pairs(missing)})")
    stored.name_if_live(spark, spec.name, location)


def _create_table(spark: SparkSession, spec: TableSpec, location: str) -> None:
    # SQL rather than DeltaTable.createIfNotExists: the builder compares `file:///x`
    # with its own `file:/x` and refuses a path table on local disk as ambiguous.
    clauses = f" CLUSTER BY ({', '.join(spec.cluster_by)})" if spec.cluster_by else ""
    if properties := spec.table_properties:
        clauses += f" TBLPROPERTIES ({_pairs(properties)})"
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS delta.`{location}` ({spec.columns}) USING delta{clauses}"
    )


def _first_commit_aside(spark: SparkSession, spec: TableSpec, location: str) -> None:
    """Make the table's first commit in a new folder and write it into `location`'s log.

    For a folder that lists something but holds no commit (a create killed between Delta
    making `_delta_log/_staged_commits` and writing the commit, or a folder emptied on
    SeaweedFS, which lists it on): Delta's catalog calls it a table and skips the CREATE,
    and Delta's create refuses a folder that lists anything. A path write would make the
    table without its NOT NULL columns and clustering; the commit made aside is the CREATE's
    own, and Delta's log store writes it as it writes any commit."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    path, log = jvm.org.apache.hadoop.fs.Path, jvm.org.apache.spark.sql.delta.DeltaLog
    parent, table = location.rstrip("/").rsplit("/", 1)
    # A hidden folder beside it (`_`: no table of the lake), new each time: one a crash
    # left behind may still list on SeaweedFS, and Delta's catalog would skip it too.
    aside = f"{parent}/_creating-{table}-{uuid.uuid4().hex}"
    fs, folder = catalog.hadoop_fs(spark, aside)
    try:
        _create_table(spark, spec, aside)
        store = log.forTable(spark._jsparkSession, aside).store()
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        fs.mkdirs(path(f"{location}/_delta_log"))  # the log store makes no folder
        for name in (f"{0:020d}.json", f"{0:020d}.crc"):  # the commit first, then its sums
            made = path(f"{aside}/_delta_log/{name}")
            if fs.exists(made):
                target = path(f"{location}/_delta_log/{name}")
                store.write(target, store.read(made, conf).iterator(), False, conf)
    finally:
        fs.delete(folder, True)
        log.invalidateCache(spark._jsparkSession, path(aside))
    log.invalidateCache(spark._jsparkSession, path(location))  # its cached log saw no table


def has_commit(spark: SparkSession, location: str) -> bool:
    """Whether the log at `location` lists a commit or a checkpoint: a table, whatever
    else its folder lists (Delta's catalog calls any folder that lists anything a table)."""
    fs, log = catalog.hadoop_fs(spark, f"{location}/_delta_log")
    if not fs.exists(log):
        return False
    return any(_COMMIT.fullmatch(s.getPath().getName()) for s in fs.listStatus(log))


_COMMIT = re.compile(
    r"\d{20}\.(json|checkpoint(\.\d+\.\d+)?\.parquet|checkpoint\.[^.]+\.(json|parquet))"
)
"""Delta's names of a commit and of a checkpoint (`FileNames` in Delta's source)."""


def create_all(spark: SparkSession, tables: Mapping[str, TableSpec]) -> None:
    """`create` each table (location -> spec), side by side: a new lake's tables each wait
    on their first commit and the catalog, not on each other."""
    side_by_side([partial(create, spark, spec, uri) for uri, spec in tables.items()], 4)


def side_by_side(calls: Sequence[Callable[[], T]], at_most: int | None = None) -> list[T]:
    """Run `calls` on threads of their own (`at_most` at once) and give their results in
    order; once all have ended, the error of the first (in order) that failed is raised.
    For work on independent tables, mostly waiting on storage and the driver: planning,
    commits, the catalog."""
    if not calls:
        return []
    with ThreadPoolExecutor(max_workers=at_most or len(calls)) as pool:
        running = [pool.submit(call) for call in calls]
    return [done.result() for done in running]


def _pairs(properties: dict[str, str]) -> str:
    return ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())


def append(frame: DataFrame, location: str, txn: Txn | None = None) -> None:
    """Append to a Delta table; under `txn`, unless that micro-batch is already there."""
    writer = frame.write.format("delta").mode("append")
    if txn is not None:
        writer = writer.option("txnAppId", txn.app_id).option("txnVersion", txn.version)
    writer.save(location)


def replace(frame: DataFrame, location: str, txn: Txn | None = None) -> None:
    """Replace every row of a Delta table with `frame` (in the table's columns) in one
    commit; under `txn`, unless that micro-batch is already there."""
    columns = DeltaTable.forPath(frame.sparkSession, location).toDF().columns
    writer = frame.select(*columns).write.format("delta").mode("overwrite")
    if txn is not None:
        writer = writer.option("txnAppId", txn.app_id).option("txnVersion", txn.version)
    writer.save(location)


def forget_cached_tables(spark: SparkSession) -> None:
    """Drop the JVM's cached snapshots of Delta tables: one deleted and made again at the
    same place must be read from its new log."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()


def table_id(spark: SparkSession, location: str) -> str:
    """The id Delta gave the table when it was made: a table made again has a new one."""
    return str(_metadata(spark, location).id())


def _properties(spark: SparkSession, location: str) -> dict[str, str]:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    scala_map = _metadata(spark, location).configuration()
    return dict(jvm.scala.jdk.javaapi.CollectionConverters.asJava(scala_map))


@dataclass(frozen=True)
class Latest:
    """A table's latest commit as its log gives it."""

    version: int
    table_id: str
    size_bytes: int
    files: int


def latest(spark: SparkSession, location: str) -> Latest:
    """The table's latest version, id, size and files, without a Spark job: size and
    files come from the checksum file Delta writes with each commit (computed only for a
    commit without one), where DESCRIBE DETAIL counts the table's files in a job (about a
    second a table in a new application)."""
    snapshot = _snapshot(spark, location)
    # The snapshot's own `numOfFiles` and `sizeInBytes` (and their `IfKnown` forms) compute
    # its whole state in a job, checksum or not; the checksum is read with the log.
    checksum = snapshot.checksumOpt()
    counted = checksum.get() if checksum.isDefined() else None
    return Latest(
        int(snapshot.version()),
        str(snapshot.metadata().id()),
        int(counted.tableSizeBytes() if counted else snapshot.sizeInBytes()),
        int(counted.numFiles() if counted else snapshot.numOfFiles()),
    )


def _metadata(spark: SparkSession, location: str) -> Any:
    """The Delta table's metadata action (id, properties) as of its latest commit, read
    from its log (not DESCRIBE DETAIL's job, above)."""
    return _snapshot(spark, location).metadata()


def _snapshot(spark: SparkSession, location: str) -> Any:
    """Delta's snapshot of the table's latest commit: its log read, its state not computed."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, location)
    none = jvm.scala.Option.empty()
    return log.update(False, none, none)


def prepare_writes(spark: SparkSession, locations: Sequence[str]) -> None:
    """Compute, on a thread of its own, what the next write under a `Txn` to each table
    asks of the table's latest version: the micro-batches it holds.

    Delta answers that from the version's whole state, in a Spark job over the table's
    log inside the write (half a second to a second a table, four or more tables a silver
    batch). Started once a batch is written, it runs while the stream waits for its next
    trigger, and the next batch's writes find it done: Delta keeps the state with the
    version, and gives the same version to every reader until the next commit. A write
    that comes first computes it itself (the two never compute it twice); what this thread
    fails at, the write does again and says."""

    def prepare() -> None:
        for location in locations:
            try:
                _snapshot(spark, location).transactions()
            except Exception:  # the write itself asks again, and fails in its own words
                continue

    threading.Thread(target=prepare, name="delta-prepare-writes", daemon=True).start()


def holds(spark: SparkSession, location: str, txn: Txn) -> bool:
    """Whether the Delta table at `location` holds the write of micro-batch `txn` (or of
    a later batch of the same query)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    if not catalog.is_delta(spark, location):
        return False
    forget_cached_tables(spark)  # the latest snapshot, not one cached before the write
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, location)
    written = log.unsafeVolatileSnapshot().transactions().get(txn.app_id)
    return bool(written.isDefined()) and int(written.get()) >= txn.version


def replaced_after(spark: SparkSession, location: str, version: int) -> bool:
    """Whether a commit after `version` replaced the whole table (a layer's rebuild): an
    incremental reader of it must start again from scratch."""
    history = spark.sql(f"DESCRIBE HISTORY delta.`{location}`").where(F.col("version") > version)
    return bool(history.where(F.col("operationParameters")["mode"] == "Overwrite").take(1))


def history_since(spark: SparkSession, uri: str, first: int) -> list[Any]:
    """The commits of the table at `uri` from version `first` on: their version, operation
    and metrics. Only those are read (`DESCRIBE HISTORY ... LIMIT`), not a long history
    each time a reader is asked; a commit landing meanwhile is read with them."""
    if not catalog.is_delta(spark, uri):
        return []
    limit = latest(spark, uri).version - first + 1
    while limit > 0:
        found = (
            spark.sql(f"DESCRIBE HISTORY delta.`{uri}` LIMIT {limit}")
            .select("version", "operation", "operationMetrics")
            .collect()
        )
        # The newest `limit` commits: they reach back to `first` unless more came since
        # the version was looked up, or the history holds no more.
        if len(found) < limit or min(h["version"] for h in found) <= first:
            return [h for h in found if h["version"] >= first]
        limit *= 2
    return []


def merge(
    rows: DataFrame,
    location: str,
    key: Sequence[str],
    txn: Txn | None = None,
    delete_when: str | None = None,
    key_ranges: dict[str, tuple[str, str]] | None = None,
) -> None:
    """Upsert `rows` into the table at `location` by `key`, setting every column of the
    table from the row's column of the same name.

    `delete_when`, a condition on the row (`s.op = 'delete'`), deletes the matching row
    instead, and such a row is never inserted. `key_ranges` (column -> its lowest and
    highest value among `rows`, as Spark casts them to text) bound the target by literals,
    so that Delta skips the files of a clustered table that cannot match, which a join
    condition alone does not.
    """
    spark = rows.sparkSession  # foreachBatch hands over a frame of its own session
    target = DeltaTable.forPath(spark, location)
    schema = target.toDF().schema
    values: dict[str, str | Column] = {c: f"s.`{c}`" for c in schema.names}
    on = reduce(
        Column.__and__,
        [F.col(f"t.`{k}`") == F.col(f"s.`{k}`") for k in key]
        + [
            # Text both ways, in the session's time zone: no Python datetime in between.
            F.col(f"t.`{c}`").between(
                F.lit(low).cast(schema[c].dataType), F.lit(high).cast(schema[c].dataType)
            )
            for c, (low, high) in (key_ranges or {}).items()
        ],
    )
    builder = target.alias("t").merge(rows.alias("s"), on)
    if delete_when:
        builder = builder.whenMatchedDelete(delete_when).whenMatchedUpdate(set=values)
        builder = builder.whenNotMatchedInsert(f"NOT ({delete_when})", values)
    else:
        builder = builder.whenMatchedUpdate(set=values).whenNotMatchedInsert(values=values)
    with _merge_txn(spark, txn) if txn else nullcontext():
        retry_on_conflict(builder.execute, location)


@contextmanager
def commits_naming(spark: SparkSession, metadata: str) -> Iterator[None]:
    """Every Delta commit of `spark`'s session within names `metadata` (Delta's commit
    `userMetadata`, in the table's history): what made it, read back by `commit_metadata`.
    The session's own: a part of `run all` has a session of its own."""
    spark.conf.set(_USER_METADATA, metadata)
    try:
        yield
    finally:
        spark.conf.unset(_USER_METADATA)


def commit_metadata(
    spark: SparkSession, location: str, versions: Sequence[int]
) -> dict[int, str | None]:
    """version -> what its commit names (`commits_naming`; None if nothing)."""
    history = DeltaTable.forPath(spark, location).history()
    found = history.where(F.col("version").isin(list(versions))).select("version", "userMetadata")
    return {r.version: r.userMetadata for r in found.collect()}


_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"


@contextmanager
def _merge_txn(spark: SparkSession, txn: Txn) -> Iterator[None]:
    """MERGE has no writer options; Delta reads the transaction from session settings.

    A batch may run its MERGEs side by side, under its one transaction: the settings are
    removed when the last of them ends, not when the first does."""
    key = (id(spark), txn)
    with _TXN_LOCK:
        if _txn_users[key] == 0:
            spark.conf.set("spark.databricks.delta.write.txnAppId", txn.app_id)
            spark.conf.set("spark.databricks.delta.write.txnVersion", str(txn.version))
        _txn_users[key] += 1
    try:
        yield
    finally:
        with _TXN_LOCK:
            _txn_users[key] -= 1
            if _txn_users[key] == 0:
                del _txn_users[key]
                spark.conf.unset("spark.databricks.delta.write.txnAppId")
                spark.conf.unset("spark.databricks.delta.write.txnVersion")


_TXN_LOCK = threading.Lock()
_txn_users: Counter[tuple[int, Txn]] = Counter()
"""MERGEs in flight per session and transaction."""


def retry_on_conflict(write: Callable[[], T], what: str, attempts: int = 5) -> T:
    """Run a Delta write again when a concurrent commit made it conflict.

    Compaction rewrites files that a MERGE may have read in the meantime; Delta then
    refuses the MERGE's commit, having written nothing, so running it again on the new
    snapshot is safe (and under the batch's transaction, still exactly once).
    """
    for attempt in range(1, attempts + 1):
        try:
            return write()
        except CONFLICTS as error:
            if attempt == attempts:
                raise
            echo(
                f"{what}: a concurrent commit conflicted ({first_line(error)[:120]}); "
                f"retrying ({attempt}/{attempts - 1})"
            )
            time.sleep(0.5 * attempt)
    raise AssertionError("unreachable")
