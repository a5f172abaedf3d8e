"""What a layer holds against what it must hold, counted: records lost, doubled, altered.

Pure functions over plain values (Kafka records as tuples, silver in the reference's shape,
gold's rows by key), so that the verdicts are unit-tested apart from any lake; `lake.py`
reads the lake into these shapes."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lakehouse.gameday.reference import Expected

KafkaRecord = tuple[Any, ...]
"""(topic, partition, offset, key, value, headers): a record as Kafka and bronze hold it."""

Loss = tuple[str, int, int, int]
"""(topic, partition, from offset, to offset): records Kafka lost, half-open."""
EXAMPLES = 3


@dataclass(frozen=True)
class Tally:
    """One comparison of a layer with what it must hold."""

    between: str
    """`kafka ↔ bronze`, `bronze ↔ silver`, `silver ↔ gold`."""
    lost: int = 0
    doubled: int = 0
    altered: int = 0
    accepted: int = 0
    """Records Kafka itself lost before bronze read them (below its broker's log-start
    offset), which the operator accepted."""
    examples: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not (self.lost or self.doubled or self.altered)

    def line(self) -> str:
        text = f"{self.between}: {self.lost} lost, {self.doubled} doubled, {self.altered} altered"
        if self.accepted:
            text += f", {self.accepted} lost in Kafka and accepted"
        return text + (f" (e.g. {'; '.join(self.examples)})" if self.examples else "")


def kafka_vs_bronze(
    sent: Iterable[KafkaRecord],
    held: Sequence[KafkaRecord],
    accepted: Iterable[Loss] = (),
) -> Tally:
    """Every record sent once in bronze (its table or its quarantine), byte for byte, but
    those Kafka lost (`accepted`: (topic, partition, from offset, to offset) half-open)."""
    ranges = list(accepted)
    expected = {r[:3]: r for r in sent}
    counts = Counter(r[:3] for r in held)
    found = {r[:3]: r for r in held}
    missing = [k for k in expected if k not in found]
    lost = [k for k in missing if not forgiven(expected[k], ranges)]
    doubled = [k for k, n in counts.items() for _ in range(n - 1)]
    altered = [k for k in found if k in expected and found[k] != expected[k]]
    unknown = [k for k in found if k not in expected]  # never sent: as wrong as a change
    return Tally(
        "kafka ↔ bronze",
        lost=len(lost),
        doubled=len(doubled),
        altered=len(altered) + len(unknown),
        accepted=len(missing) - len(lost),
        examples=_examples(
            [("lost", k) for k in lost] + [("doubled", k) for k in doubled]
            + [("altered", k) for k in altered + unknown]
        ),
    )  # fmt: skip


def forgiven(record: KafkaRecord, losses: Sequence[Loss]) -> bool:
    """Whether `record` is in one of Kafka's `losses`."""
    topic, partition, offset = record[:3]
    return any((t, p) == (topic, partition) and a <= offset < b for t, p, a, b in losses)


def silver_vs_reference(found: Expected, expected: Expected) -> Tally:
    """Silver's rows, sessions, violations and row changes against the reference's, by key
    and value: a key silver holds n times is n - 1 doubled, a key the reference lacks or a
    value unlike the reference's is altered."""
    lost: list[tuple[str, Hashable]] = []
    doubled: list[tuple[str, Hashable]] = []
    altered: list[tuple[str, Hashable]] = []
    have_tables = found.tables()
    for table, pairs in expected.tables().items():
        want = dict(pairs)
        have: dict[Any, list[Any]] = defaultdict(list)
        for key, value in have_tables[table]:
            have[key].append(value)
        lost += [(table, k) for k in want if k not in have]
        doubled += [(table, k) for k, values in have.items() for _ in values[1:]]
        altered += [
            (table, k) for k, values in have.items()
            if k not in want or any(not _same_values(v, want[k]) for v in values)
        ]  # fmt: skip
    return _tally("bronze ↔ silver", lost, doubled, altered)


def _same_values(found: Sequence[Any], expected: Sequence[Any]) -> bool:
    return len(found) == len(expected) and all(map(same, found, expected))


def rows_vs_reference(
    table: str,
    found: Sequence[Mapping[str, Any]],
    key: Sequence[str],
    expected: Mapping[tuple[Any, ...], Mapping[str, Any]],
) -> Tally:
    """A gold table's rows against the rows computed again from silver, by `key`."""
    expected = {tuple(_plain(k) for k in keys): row for keys, row in expected.items()}
    keys = Counter(tuple(row[k] for k in key) for row in found)
    have = {tuple(row[k] for k in key): row for row in found}
    lost: list[tuple[str, Hashable]] = [(table, k) for k in expected if k not in have]
    doubled: list[tuple[str, Hashable]] = [
        (table, k) for k, n in keys.items() if k not in expected for _ in range(n)
    ]
    doubled += [(table, k) for k, n in keys.items() if k in expected for _ in range(n - 1)]
    altered: list[tuple[str, Hashable]] = [
        (table, k)
        for k, values in expected.items()
        if k in have and any(not same(have[k][c], v) for c, v in values.items())
    ]
    return _tally("silver ↔ gold", lost, doubled, altered)


def combined(between: str, tallies: Sequence[Tally]) -> Tally:
    return Tally(
        between,
        lost=sum(t.lost for t in tallies),
        doubled=sum(t.doubled for t in tallies),
        altered=sum(t.altered for t in tallies),
        accepted=sum(t.accepted for t in tallies),
        examples=tuple(e for t in tallies for e in t.examples)[:EXAMPLES],
    )


def same(found: Any, expected: Any) -> bool:
    """Equal, floats to 1e-9 relative (a sum's order differs between Spark and pandas), a
    NaN expected where SQL has NULL."""
    if isinstance(expected, float) and not isinstance(found, str):
        if expected != expected:  # NaN: pandas' mean of nothing
            return found is None
        return found is not None and math.isclose(found, expected, rel_tol=1e-9)
    return bool(found == expected)


def _tally(
    between: str,
    lost: list[tuple[str, Hashable]],
    doubled: list[tuple[str, Hashable]],
    altered: list[tuple[str, Hashable]],
) -> Tally:
    return Tally(
        between,
        lost=len(lost),
        doubled=len(doubled),
        altered=len(altered),
        examples=_examples(
            [("lost", f"{t} {k}") for t, k in lost] + [("doubled", f"{t} {k}") for t, k in doubled]
            + [("altered", f"{t} {k}") for t, k in altered]
        ),
    )  # fmt: skip


def _examples(found: list[tuple[str, Any]]) -> tuple[str, ...]:
    return tuple(f"{what} {key}" for what, key in found[:EXAMPLES])


def _plain(value: Any) -> Any:
    """pandas' timestamp as the datetime Spark gives, to key both sides alike."""
    return value.to_pydatetime() if hasattr(value, "to_pydatetime") else value
