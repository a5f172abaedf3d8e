"""What `lakehouse shadow` does: a layer built again beside the live one, with the code and
settings of the checkout it is started from, then made live by repointing names.

The versions themselves are `core/versions.py`; this module runs the commands on them:
- `start` declares a shadow of silver (and gold after it) or of gold;
- `run` builds it from all of bronze and follows bronze, as `run all` minus bronze;
- `where` says how far each version has read, and whether both read the same input;
- `swap` makes it live: the versions' document first, which retires the old version's
  writers after their batch; once they let go of its tables, the names in the catalog.
  Killed anywhere, it is finished by running it again, and until then `names_against`
  says which names still disagree with the document;
- `drop` deletes the version beside the live one, once no name points at it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse import definitions as pipeline
from lakehouse.core import versions
from lakehouse.core.console import echo
from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import Settings
from lakehouse.core.versions import Versions
from lakehouse.graph.nodes import select
from lakehouse.observe import progress
from lakehouse.ops.run import LayerRun, run
from lakehouse.quality import store
from lakehouse.storage import catalog, delta, lease, positions
from lakehouse.storage import versions as stored

SILVER_STREAM = pipeline.STREAMS["silver"].checkpoint


def part_of(settings: Settings, selection: str) -> str:
    """The part a selection rebuilds: `silver`, or `gold` for gold or any of its models."""
    if selection == "silver":
        return "silver"
    if selection != "gold" and not select(
        pipeline.graph(settings), [f"{selection},layer:gold,type:model"]
    ):
        raise LakehouseError(
            f"`{selection}` selects neither silver nor a gold model (see `lakehouse ls`)"
        )
    return "gold"


def start(settings: Settings, selection: str) -> Versions:
    """Declare a shadow of what `selection` names and what is downstream of it."""
    before = stored.read(settings)
    kept = stored.write(settings, before, versions.start(before, part_of(settings, selection)))
    echo(
        f"shadow {kept.other}: {' and '.join(kept.parts)}, built beside the live version with "
        "this checkout's code and settings. Next: `lakehouse shadow run --continuous` builds "
        "it from all of bronze and follows bronze; `lakehouse shadow status` says how far it is"
    )
    return kept


def run_shadow(spark: SparkSession, settings: Settings, continuous: bool, asked: dict) -> None:
    """Build the shadow (`settings` at its versions) to bronze's end, or follow bronze."""
    parts = stored.read(settings).parts
    streams = ("silver",) if "silver" in parts else ()
    run(spark, settings, LayerRun("all", asked, continuous=continuous, streams=streams))


@dataclass(frozen=True)
class Side:
    """How far one version has read."""

    tag: str
    silver_read: int | None = None
    """The first bronze version its silver stream has not read (None: not started)."""
    silver_busy: bool = False
    """Its silver stream began a batch it has not committed."""
    gold_behind: dict[str, int] = field(default_factory=dict)
    """Model -> versions of its inputs it has not read yet."""
    checks_failed: dict[str, int] = field(default_factory=dict)
    """Table -> validations of it that failed (stream batches and gold runs)."""
    checks_run: int = 0


@dataclass(frozen=True)
class Where:
    """Both versions side by side, and whether they have read the same input."""

    versions: Versions
    live: Side
    shadow: Side
    bronze_version: int
    records_behind: int
    seconds_behind: float
    misnamed: tuple[Misnamed, ...] = ()
    """The catalog's names that disagree with the versions (a swap not finished)."""

    @property
    def same_input(self) -> str | None:
        """None when both read the same bronze and gold is up to date on both; else why not."""
        if busy := [s.tag for s in (self.live, self.shadow) if s.silver_busy]:
            return f"silver is in the middle of a batch ({', '.join(busy)})"
        if "silver" in self.versions.parts and self.live.silver_read != self.shadow.silver_read:
            return (
                f"silver has read bronze to version {_read(self.live)} live and "
                f"{_read(self.shadow)} in the shadow"
            )
        behind = {
            f"{model} ({side})": n
            for side, of in (("live", self.live), ("shadow", self.shadow))
            for model, n in of.gold_behind.items()
            if n
        }
        if behind:
            return "gold has not read all of its inputs: " + ", ".join(
                f"{model} {'never ran' if n < 0 else f'{n} versions behind'}"
                for model, n in sorted(behind.items())
            )
        return None

    def as_json(self) -> dict[str, Any]:
        return {
            "versions": self.versions.as_json(),
            "live": asdict(self.live),
            "shadow": asdict(self.shadow),
            "bronze_version": self.bronze_version,
            "records_behind": self.records_behind,
            "seconds_behind": self.seconds_behind,
            "same_input": self.same_input is None,
            "why_not": self.same_input,
            "misnamed": [asdict(m) for m in self.misnamed],
        }


def _read(side: Side) -> str:
    return "none" if side.silver_read is None else str(side.silver_read - 1)


def where(spark: SparkSession, settings: Settings) -> Where:
    """How far the live version and the one beside it have read."""
    now = stored.read(settings)
    if now.other is None:
        raise LakehouseError("no version beside the live one: `lakehouse shadow start silver`")
    live = pipeline.at_tags(settings, now.tags(False))
    other = other_settings(settings, now)
    tags = ((live, now.live_tag(now.parts[0])), (other, str(now.other)))
    live_side, shadow_side = sides = [_side(spark, s, tag) for s, tag in tags]
    bronze = settings.storage.table_uri(pipeline.KAFKA_RECORDS)
    latest = delta.latest(spark, bronze).version
    ahead, behind = sorted((s.silver_read or 0) for s in sides)[::-1]
    records = sum(
        int((h["operationMetrics"] or {}).get("numOutputRows", 0))
        for h in delta.history_since(spark, bronze, behind)
        if h["version"] < ahead
    )
    lags = positions.reader_lags(
        spark, other, [r for r in pipeline.READERS if r.checkpoint == SILVER_STREAM],
        {pipeline.KAFKA_RECORDS: bronze},
    )  # fmt: skip
    seconds = max((lag.seconds for found in lags.values() for lag in found), default=0.0)
    misnamed = tuple(names_against(spark, settings, now))
    return Where(now, live_side, shadow_side, latest, records, seconds, misnamed)


@dataclass(frozen=True)
class Misnamed:
    """A name of the catalog that disagrees with the lake's versions."""

    name: str
    points_at: str | None
    should: str | None
    """The live version's table; None where that version has not made it (yet)."""

    def line(self) -> str:
        should = self.should or "nothing (the live version has no such table yet)"
        return f"{self.name} points at {self.points_at or 'nothing'}; the versions say {should}"


def misnamed(
    named: Mapping[str, str | None], live: Mapping[str, str | None], beside: Mapping[str, str]
) -> list[Misnamed]:
    """The names (name -> where the catalog points it, None: nowhere) that disagree with
    the versions: a name points at its live version's table where there is one (`live`,
    None where not made yet), and never at the version beside it (`beside`). A table the
    live version has not made may be named elsewhere (another lake on the same catalog)."""

    def wrong(name: str, at: str | None) -> bool:
        if (should := live.get(name)) is not None:
            return at is None or not catalog.same_place(at, should)
        return at is not None and name in beside and catalog.same_place(at, beside[name])

    return [Misnamed(n, at, live.get(n)) for n, at in sorted(named.items()) if wrong(n, at)]


def names_against(
    spark: SparkSession, settings: Settings, now: Versions | None = None
) -> list[Misnamed]:
    """The names of the versioned tables that disagree with the lake's versions `now`."""
    now = now or stored.read(settings)
    live = pipeline.at_tags(settings, now.tags(False)).storage
    other = other_settings(settings, now).storage if now.other else live
    tables = [t for p in versions.PARTS for t in pipeline.VERSIONED[p] if t in pipeline.TABLES]
    named = {t: catalog.location_of(spark, t) for t in tables}
    made = {
        t: uri
        for t in tables
        if catalog.same_place(named[t] or "", uri := live.table_uri(t))
        or catalog.is_delta(spark, uri)
    }
    beside = {t: other.table_uri(t) for t in tables if other.table_uri(t) != live.table_uri(t)}
    return misnamed(named, {t: made.get(t) for t in tables}, beside)


def misnamed_lines(found: Sequence[Misnamed], until: str) -> list[str]:
    """The names against the versions as a person reads them: one line per name that
    disagrees, under the command that points them as the versions say (`finishing`)."""
    if not found:
        return ["names: each as the lake's versions say"]
    return [
        f"names: {len(found)} disagree with the lake's versions, until {until}:",
        *(f"  {m.line()}" for m in found),
    ]


def finishing(now: Versions) -> str:
    """The command that points the names as the versions say."""
    if now.state == versions.SWAPPED:
        return "`lakehouse shadow swap`"
    return "`lakehouse shadow swap --back`" if now.other else "`lakehouse catalog register`"


def _side(spark: SparkSession, settings: Settings, tag: str) -> Side:
    checkpoint = settings.storage.checkpoint_uri(SILVER_STREAM)
    silver_read = positions.stream_next_version(spark, checkpoint)
    busy = positions.batch_begun(spark, checkpoint)
    models = [r for r in pipeline.READERS if r.model is not None]
    tables = {r.table: settings.storage.table_uri(r.table) for r in models}
    read = positions.next_versions(spark, settings, models)
    gold_behind: dict[str, int] = {}
    for table, readers in read.items():
        if catalog.is_delta(spark, tables[table]):
            latest = delta.latest(spark, tables[table]).version
            for reader, next_version in readers:
                gold_behind[reader] = max(gold_behind.get(reader, 0), latest + 1 - next_version)
    for model in pipeline.MODELS:
        gold_behind.setdefault(model.name, -1)  # never ran
    failed, ran = _checks(spark, settings)
    return Side(tag, silver_read, busy, gold_behind, failed, ran)


def _checks(spark: SparkSession, settings: Settings) -> tuple[dict[str, int], int]:
    """Failed validations by table, and all validations, in this version's results."""
    frames = [
        spark.read.format("delta").load(uri)
        for layer in ("silver", "gold")
        if catalog.is_delta(
            spark, uri := settings.storage.table_uri(store.results_table(layer).name)
        )
    ]
    if not frames:
        return {}, 0
    rows = frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])
    counted = rows.groupBy("table_name").agg(
        F.count("*").alias("ran"), F.sum(F.when(~F.col("success"), 1).otherwise(0)).alias("failed")
    )
    found = counted.collect()
    return {r["table_name"]: int(r["failed"]) for r in found if r["failed"]}, sum(
        int(r["ran"]) for r in found
    )


def swap(spark: SparkSession, settings: Settings, back: bool, wait_s: float) -> Versions:
    """Make the version beside the live one live (`back`: the one a swap retired), then
    name it in the catalog once the retired version's writers have let go of its tables."""
    before = stored.read(settings)
    done = versions.SHADOW if back else versions.SWAPPED
    tables = [t for p in before.parts for t in pipeline.VERSIONED[p] if t in pipeline.TABLES]
    if before.state == done:  # killed after the versions changed: finish naming
        now = before
    else:
        now = versions.swap(before, back)
        if not back:  # going back, a table only the new version made loses its name
            _refuse_unmade(spark, settings, before, now, tables)
        now = stored.write(settings, before, now)
    retired, live = other_settings(settings, now), pipeline.at_tags(settings, now.tags(False))
    if back:  # the version going back beside the live one is a shadow again: it goes on
        _name(spark, live, retired, now, tables)
        echo(f"shadow swap --back: {now.live_tag(now.parts[0])} answers to the names again")
        return now
    echo(f"shadow swap: {now.live_tag(now.parts[0])} is live; waiting for {now.other}'s writers")
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with lease.holding(retired, tables, "lakehouse shadow swap", exclusive=True):
                _name(spark, live, retired, now, tables)
            break
        except lease.LeaseRefused as refused:
            if time.monotonic() > deadline:
                raise LakehouseError(
                    f"{now.other} still has a writer after {wait_s:.0f}s ({refused}): stop the "
                    "pipeline of that version, then run `lakehouse shadow swap` again to name "
                    f"{now.live_tag(now.parts[0])} in the catalog"
                ) from None
            time.sleep(2)
    echo(
        f"shadow swap: {', '.join(now.parts)} at {now.live_tag(now.parts[0])} now answer to "
        f"their names; {now.other} is kept as `<table>__{now.other}` for `lakehouse shadow "
        "swap --back` until `lakehouse shadow drop`"
    )
    return now


def _refuse_unmade(
    spark: SparkSession, settings: Settings, before: Versions, after: Versions, tables: list[str]
) -> None:
    """Refused while the shadow lacks a table the live version has (a gold model that never
    ran there): its name would stay on a version about to be retired, and then dropped."""
    live, shadow = (pipeline.at_tags(settings, v.tags(False)).storage for v in (before, after))
    if missing := [
        t
        for t in tables
        if catalog.is_delta(spark, live.table_uri(t))
        and not catalog.is_delta(spark, shadow.table_uri(t))
    ]:
        raise LakehouseError(
            f"{after.live_tag(after.parts[0])} has no {', '.join(missing)}, which the live "
            f"{before.live_tag(after.parts[0])} has: run the shadow until it makes them "
            "(`lakehouse shadow status` says what never ran), then swap"
        )


def _name(
    spark: SparkSession, live: Settings, retired: Settings, now: Versions, tables: list[str]
) -> None:
    """Name the other version's tables `<name>__<tag>`, then point each name at the live
    version's table (or at nothing, where it has none): until the last name is pointed,
    `names_against` names what is left, and running this again finishes it."""
    spark.conf.set("spark.databricks.delta.alterLocation.bypassSchemaCheck", "true")
    for table in tables:
        old = retired.storage.table_uri(table)
        if catalog.is_delta(spark, old):
            catalog.register(spark, f"{table}__{now.other}", old)
    for table in tables:
        location, old = live.storage.table_uri(table), retired.storage.table_uri(table)
        if catalog.is_delta(spark, location):
            catalog.repoint(spark, table, location)
        elif catalog.names(spark, table, old):
            catalog.forget(spark, table)
    views = ((progress.VIEW, progress.progress_table), (store.RESULTS_VIEW, store.results_table))
    for view, spec_of in views:
        named = [spec_of(writer).name for writer in store.WRITERS]
        catalog.unite(spark, view, {name: live.storage.table_uri(name) for name in named})


def other_settings(settings: Settings, now: Versions) -> Settings:
    """`settings` on the version beside the live one."""
    return pipeline.at_tags(settings, now.other_tags())


def drop(spark: SparkSession, settings: Settings) -> Versions:
    """Delete the version beside the live one: its tables, checkpoint and names."""
    before = stored.read(settings)
    if before.other is None:
        raise LakehouseError("there is no version beside the live one to drop")
    other = other_settings(settings, before)
    names = [t for part in before.parts for t in pipeline.VERSIONED[part]]
    tables = [t for t in names if t in pipeline.TABLES]
    with lease.holding(other, tables, "lakehouse shadow drop", exclusive=True):
        if held := [t for t in tables if catalog.names(spark, t, other.storage.table_uri(t))]:
            raise LakehouseError(
                f"{before.other}'s tables, which drop would delete, are still named "
                f"{', '.join(held)}: {finishing(before)} points the names as the versions "
                "say (`lakehouse shadow status` names each), then drop"
            )
        for name in names:
            uri = (other.storage.table_uri if name in tables else other.storage.checkpoint_uri)(
                name
            )
            fs, path = catalog.hadoop_fs(spark, uri)
            fs.delete(path, True)
            if name in tables:
                catalog.forget(spark, f"{name}__{before.other}")
    kept = stored.write(settings, before, versions.drop(before))
    echo(f"shadow drop: {before.other} ({', '.join(before.parts)}) deleted")
    return kept
