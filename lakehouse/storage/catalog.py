"""Tables by name: every Delta table under the storage root, registered in the catalog.

A table's data and log live at `<root>/<layer>/<table>`; the catalog only maps the name
`<layer>.<table>` to that location (an external table), so dropping a name never drops
data. The settings decide where a table is: when the catalog names another location (the
root moved), the name is pointed at the settings' one.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from functools import reduce
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

from lakehouse.core import versions
from lakehouse.core.console import echo
from lakehouse.core.settings import StorageSettings

LAYERS = ("bronze", "silver", "gold", "quality", "ops")
"""The databases: one per layer, plus the quality results and the pipeline's progress."""


def register(
    spark: SparkSession, name: str, location: str, echo: Callable[[str], None] = echo
) -> None:
    """Make `name` (`<layer>.<table>`) name the Delta table at `location`."""
    layer, table = name.split(".", 1)
    for attempt in range(_ATTEMPTS):
        with _DDL:
            spark.sql(f"CREATE DATABASE IF NOT EXISTS {layer}")
            registered = location_of(spark, name)
            if registered is not None and same_place(registered, location):
                return
            if registered is not None:
                # An external table: dropping the name leaves the data where it is. Dropped
                # in the metastore itself: Spark's DROP TABLE would open the old table,
                # whose storage may be gone (a lake moved off a server that is down) and
                # retried for minutes.
                echo(f"catalog: {name} named {registered}; now {location} (from the settings)")
                _metastore(spark).dropTable(layer, table, True, False)
            try:
                spark.sql(f"CREATE TABLE {name} USING delta LOCATION '{location}'")
                return
            except AnalysisException as error:
                # Another application (the other jobs of a lake, each its own process)
                # named it between our look and our create: the lock above is this
                # process's only. Look again: the name may already be this table.
                if not _named_meanwhile(error) or attempt == _ATTEMPTS - 1:
                    raise


def repoint(spark: SparkSession, name: str, location: str) -> None:
    """Point `name` at the Delta table at `location` in one change of the catalog, which
    readers see at once (a name that does not exist yet is made)."""
    for attempt in range(_ATTEMPTS):
        if location_of(spark, name) is None:
            register(spark, name, location)
            return
        with _DDL:
            try:
                spark.sql(f"ALTER TABLE {name} SET LOCATION '{location}'")
                return
            except AnalysisException as error:
                # The new live version's writer named its table between our look and the
                # change (a swap's names race its first turn): look again.
                if error.getCondition() not in _RACES or attempt == _ATTEMPTS - 1:
                    raise


def forget(spark: SparkSession, name: str) -> None:
    """No name `name` any more; the table it named stays where it is."""
    layer, table = name.split(".", 1)
    with _DDL:
        _metastore(spark).dropTable(layer, table, True, False)


def _named_meanwhile(error: AnalysisException) -> bool:
    """Whether a create failed only because the name exists: found by Spark's own look,
    or by the metastore when another application made it after that look."""
    return (
        error.getCondition() == "TABLE_OR_VIEW_ALREADY_EXISTS"
        or "AlreadyExistsException" in str(error)
    )


_DDL = threading.RLock()
"""The parts of `run all` name their tables from threads of one process: the metastore's
`IF NOT EXISTS` and `OR REPLACE` check, then create, so two at once may both create."""


def register_lake(spark: SparkSession, storage: StorageSettings) -> list[str]:
    """Register every Delta table of the lake: the live version of each by its name, any
    other version as `<name>__<tag>` (`lakehouse shadow`); their names, sorted."""
    named = []
    for folder, location in lake_tables(spark, storage.root).items():
        name = re.sub(r"__v\d+$", "", folder)
        if not same_place(storage.table_uri(name), location):
            name = f"{name}__{versions.tag_of(folder[len(name) :])}"
        register(spark, name, location)
        named.append(name)
    return sorted(named)


def lake_tables(spark: SparkSession, root: str) -> dict[str, str]:
    """Every Delta table at `<root>/<layer>/<table>`: name -> location."""
    return {
        f"{layer}.{table}": f"{root}/{layer}/{table}"
        for layer in LAYERS
        for table in _folders(spark, f"{root}/{layer}")
        if is_delta(spark, f"{root}/{layer}/{table}")
    }


def location_of(spark: SparkSession, name: str) -> str | None:
    """Where the catalog says `name` is, or None when it names nothing; read from the
    metastore alone, without opening the table at that location."""
    database, table = name.split(".", 1)
    metastore = _metastore(spark)
    # Under the lock: another part's `register` drops a name and makes it again, and a
    # look between the two found it gone (that stopped `run all` on a new lake). Another
    # application may still re-point it between our two reads: then it names nothing.
    with _DDL:
        if not metastore.tableExists(database, table):
            return None
        try:
            location = metastore.getTable(database, table).location()
        except AnalysisException as error:
            if error.getCondition() == "TABLE_OR_VIEW_NOT_FOUND":
                return None
            raise
    return None if location is None else str(location.toString())


def _metastore(spark: SparkSession) -> Any:
    """Spark's own client of the catalog's metastore (Hive's, or in memory)."""
    return spark._jsparkSession.sessionState().catalog().externalCatalog()


def is_delta(spark: SparkSession, path: str) -> bool:
    from delta.tables import DeltaTable

    if DeltaTable.isDeltaTable(spark, path):
        return True
    # Delta answers from the log it cached for the path when it last found no table: one
    # another process made since (bronze, for a `shadow run` that waits on it) stays unseen.
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    location = jvm.org.apache.hadoop.fs.Path(path)
    jvm.org.apache.spark.sql.delta.DeltaLog.invalidateCache(spark._jsparkSession, location)
    return bool(DeltaTable.isDeltaTable(spark, path))


def hadoop_fs(spark: SparkSession, uri: str) -> tuple[Any, Any]:
    """Hadoop's FileSystem for `uri` and the path in it: storage of any scheme (file, s3a)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    path = jvm.org.apache.hadoop.fs.Path(uri)
    return path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), path


def _folders(spark: SparkSession, uri: str) -> Iterable[str]:
    fs, path = hadoop_fs(spark, uri)
    if not fs.exists(path):
        return []
    return sorted(
        s.getPath().getName()
        for s in fs.listStatus(path)
        if s.isDirectory() and not s.getPath().getName().startswith(("_", "."))
    )


def names(spark: SparkSession, name: str, location: str) -> bool:
    """Whether the catalog's `name` is the table at `location` (and not another lake's)."""
    registered = location_of(spark, name)
    return registered is not None and same_place(registered, location)


def same_place(a: str, b: str) -> bool:
    """Whether two URIs name one place: the catalog writes `file:/x` for `file:///x`."""

    def norm(uri: str) -> str:
        return re.sub(r"^file:/+", "file:///", uri).rstrip("/")

    return norm(a) == norm(b)


def read_united(spark: SparkSession, locations: Iterable[str]) -> DataFrame | None:
    """The Delta tables at `locations` (those that exist) as one frame, by column name:
    the tables of one kind that each writer keeps apart. None if none exists yet."""
    found = [spark.read.format("delta").load(uri) for uri in locations if is_delta(spark, uri)]
    return reduce(DataFrame.unionByName, found) if found else None


def unite(spark: SparkSession, view: str, tables: dict[str, str]) -> None:
    """(Re)make `view` over the tables (name -> location) the catalog names at their
    location: this lake's only, never another lake's of the same name, on storage now gone."""
    for attempt in range(_ATTEMPTS):
        with _DDL:  # no part of this application re-points a name while the view is made
            named = [name for name, location in tables.items() if names(spark, name, location)]
            union = " UNION ALL ".join(f"SELECT * FROM {name}" for name in named)
            try:
                spark.sql(f"CREATE OR REPLACE VIEW {view} AS {union}")
                return
            except AnalysisException as error:
                # Another application made the view between Spark's look for it and its
                # create (bronze and silver start side by side), or re-pointed one of its
                # tables between our look and the create: look again and make it again.
                if error.getCondition() not in _RACES or attempt == _ATTEMPTS - 1:
                    raise


_ATTEMPTS = 3
"""Looks at a name before giving up: two applications on it collide once in a while
(the jobs of one lake, or two lakes on one catalog, as in the tests), not three times in
a row."""
_RACES = ("TABLE_OR_VIEW_ALREADY_EXISTS", "TABLE_OR_VIEW_NOT_FOUND")
