"""Versions of the lake's layers: the live one, and one beside it (a shadow being built,
or the old live one kept after a swap).

A layer's version is a set of tables and checkpoints of their own: silver's stream and
every table it writes, or gold's models with their run log. The first version keeps the
plain folders (`<root>/silver/sessions`); a later one adds its tag (`sessions__v2`). Which
version is live is one small document (`Versions`), replaced as a whole: this module says
what each change makes of it, `storage/versions.py` where it is kept.

A part (`silver`, `gold`) of a running process goes on while its version is live or is
the shadow being built; once a swap retires it, it stops after its batch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from lakehouse.core.errors import LakehouseError

PARTS = ("silver", "gold")
"""The layers a version can hold, upstream first: a shadow of one holds those after it."""
FIRST = "v1"
"""The tag of the version every lake starts with: its tables in the plain folders."""
SHADOW, SWAPPED = "shadow", "swapped"
"""What the version beside the live one is: being built, or the live one before a swap."""

_TAG = re.compile(r"v([1-9][0-9]*)")
_SUFFIX = re.compile(r"__v[1-9][0-9]*$")


class VersionError(LakehouseError):
    """A change the versions as they stand do not allow; the message says what to do."""


@dataclass(frozen=True)
class Versions:
    """Which version of each part is live, and the one beside it, if any."""

    generation: int = 0
    """How many changes made it: a change is kept only if none was kept since it read."""
    live: Mapping[str, str] = field(default_factory=dict)
    """Part -> tag of its live version; a part not named is at `FIRST`."""
    other: str | None = None
    """Tag of the version beside the live one."""
    parts: tuple[str, ...] = ()
    """The parts `other` holds: `silver, gold` or `gold`."""
    state: str = ""
    """`SHADOW` (other is being built) or `SWAPPED` (other was live before the swap)."""

    def live_tag(self, part: str) -> str:
        return self.live.get(part, FIRST)

    def continues(self, part: str, tag: str) -> bool:
        """Whether a process running `part` at `tag` goes on: the live version does, and
        the shadow being built; a version a swap retired stops after its batch."""
        building = self.state == SHADOW and tag == self.other and part in self.parts
        return tag == self.live_tag(part) or building

    def tags(self, shadow: bool) -> dict[str, str]:
        """Part -> the tag a process runs: the live ones, or for a shadow's process the
        shadow's tag for the parts it holds."""
        if shadow and self.state != SHADOW:
            raise VersionError(
                "there is no shadow to run: start one with `lakehouse shadow start silver`"
                if self.other is None
                else f"{self.other} is the version a swap retired, kept for `lakehouse shadow "
                "swap --back`; a new shadow needs `lakehouse shadow drop` first"
            )
        return self.other_tags() if shadow else {part: self.live_tag(part) for part in PARTS}

    def other_tags(self) -> dict[str, str]:
        """Part -> tag of the version beside the live one, where it has one, else live."""
        beside = dict.fromkeys(self.parts, str(self.other))
        return {part: beside.get(part, self.live_tag(part)) for part in PARTS}

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "live": dict(self.live), "parts": list(self.parts)}

    @classmethod
    def of_json(cls, data: Mapping[str, Any]) -> Versions:
        return cls(
            int(data["generation"]),
            dict(data["live"]),
            data.get("other"),
            tuple(data.get("parts", ())),
            data.get("state", ""),
        )


def parts_from(part: str) -> tuple[str, ...]:
    """`part` and the parts downstream of it: a new silver is read by a new gold."""
    if part not in PARTS:
        raise VersionError(f"a shadow holds one of {', '.join(PARTS)} and what follows it")
    return PARTS[PARTS.index(part) :]


def start(versions: Versions, part: str) -> Versions:
    """A shadow of `part` and the parts downstream of it, at a tag not used before."""
    if versions.other is not None:
        what = "a shadow" if versions.state == SHADOW else "the version a swap retired"
        raise VersionError(
            f"{versions.other} is {what}: one version beside the live one at a time; "
            "`lakehouse shadow drop` it first"
        )
    used = [int(m[1]) for t in versions.live.values() if (m := _TAG.fullmatch(t))]
    tag = f"v{max([1, *used]) + 1}"
    return replace(versions, other=tag, parts=parts_from(part), state=SHADOW)


def swap(versions: Versions, back: bool = False) -> Versions:
    """The version beside the live one made live, and the live one kept beside it: a
    shadow after `swap`, the retired one after `swap --back`."""
    wanted = SWAPPED if back else SHADOW
    if versions.state != wanted:
        raise VersionError(
            ("no swap to undo" if back else "no shadow to swap in")
            + (f": {versions.other} is {versions.state}" if versions.other else "")
            + ("" if back else "; start one with `lakehouse shadow start silver`")
        )
    other = str(versions.other)
    live = {**versions.live, **{part: other for part in versions.parts}}
    before = {versions.live_tag(part) for part in versions.parts}
    assert len(before) == 1, f"the parts {versions.parts} are live at different versions"
    return replace(versions, live=live, other=before.pop(), state=SWAPPED if not back else SHADOW)


def drop(versions: Versions) -> Versions:
    """No version beside the live one any more (its tables go with it)."""
    if versions.other is None:
        raise VersionError("there is no version beside the live one to drop")
    return replace(versions, other=None, parts=(), state="")


def suffix(tag: str) -> str:
    """What a version adds to the folder of each of its tables: nothing for the first."""
    return "" if tag == FIRST else f"__{tag}"


def tag_of(folder_suffix: str) -> str:
    """The tag whose folders have this `suffix`."""
    return folder_suffix.removeprefix("__") or FIRST


def is_versioned(location: str) -> bool:
    """Whether a table's folder is a later version's (it has a tag of its own)."""
    return bool(_SUFFIX.search(location.rstrip("/")))


def part_of(name: str) -> str | None:
    """The part whose versions hold the table `name`, None for a table of one version
    (bronze's, `lakehouse check`'s): a part's own layer, and its results and progress
    (`quality.gold_expectation_results`, `ops.silver_progress`). For code below the
    pipeline's definitions, whose `VERSIONED` lists the same (a test holds them equal)."""
    layer, table = name.split(".", 1)
    return next((p for p in PARTS if layer == p or table.startswith(f"{p}_")), None)


def lake_of(name: str, location: str) -> tuple[str, str] | None:
    """(storage root, tag) of the folder `location` of table `name`
    (`<root>/<layer>/<table><suffix>`); None for a folder laid out otherwise."""
    folder = location.rstrip("/")
    found = _SUFFIX.search(folder)
    suffix = found.group(0) if found else ""
    base, tail = folder.removesuffix(suffix), "/" + name.replace(".", "/", 1)
    return (base.removesuffix(tail), tag_of(suffix)) if base.endswith(tail) else None


def names(now: Versions, name: str, tag: str) -> bool:
    """Whether the catalog's `name` belongs on version `tag` of its table: the live
    version's, never a shadow's or one a swap retired."""
    part = part_of(name)
    return tag == (FIRST if part is None else now.live_tag(part))


def folders(tables_of: Mapping[str, Sequence[str]], tags: Mapping[str, str]) -> dict[str, str]:
    """Table (or checkpoint) name -> the suffix of its folder, for the parts' `tags`."""
    return {name: suffix(tags[part]) for part, names in tables_of.items() for name in names}
