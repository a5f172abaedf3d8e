"""The sensor protocol, typed: every field a sensor sends, with its type and bounds.

Parsing reads records with it (`parse_message`), and the silver tables take their value
columns from it (`VALUE_COLUMNS`), so whatever parsing accepts, the tables can store
without a cast that could fail. `docs/protocol.md` writes it out; a test keeps the two
in step.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

BIGINT_MIN, BIGINT_MAX = -(2**63), 2**63 - 1
SEQ_MAX = BIGINT_MAX - 1
"""One below BIGINT's top, so that the seq expected next still fits a BIGINT column."""

EVENT_TIME_RANGE = (datetime(1970, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC))
"""Outside these years a sensor's clock is broken, not early or late."""

ID_MAX_LENGTH = 128
STATUS_MAX_LENGTH = 32
ID_PATTERN = rf"^[^\x00-\x1f\x7f-\x9f]{{1,{ID_MAX_LENGTH}}}$"
"""Ids are 1 to 128 characters without control characters: they key state and name rows
in every table and terminal. The silver stream keys records by the same pattern."""

_TIMESTAMP = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})"
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class ProtocolError(ValueError):
    """A message breaks the protocol; the text names the field and what it found."""


class FieldType(StrEnum):
    STRING = "string"
    INTEGER = "integer"
    NUMBER = "number"
    TIMESTAMP = "timestamp"


SPARK_TYPES = {
    FieldType.STRING: "STRING",
    FieldType.INTEGER: "BIGINT",
    FieldType.NUMBER: "DOUBLE",
    FieldType.TIMESTAMP: "TIMESTAMP",
}


@dataclass(frozen=True)
class Field:
    """One field of a message: its JSON name, type, bounds and meaning."""

    name: str
    type: FieldType
    meaning: str
    optional: bool = False
    """May be missing or null (stored as NULL)."""
    max_length: int | None = None
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] = ()

    @property
    def column(self) -> str:
        """The silver column that stores it, in Spark SQL DDL."""
        meaning = self.meaning.replace("'", "\N{RIGHT SINGLE QUOTATION MARK}")  # ' ends SQL text
        return (
            f"{self.name} {SPARK_TYPES[self.type]} COMMENT '{meaning}, as sent; null if "
            "missing or null in the record, and on a delete'"
        )

    @property
    def rule(self) -> str:
        """What the field accepts, as docs/protocol.md says it."""
        if self.choices:
            return ", ".join(f"`{c}`" for c in self.choices)
        if self.type is FieldType.STRING:
            return f"1 to {self.max_length} characters, no control characters"
        if self.type is FieldType.INTEGER:
            return f"JSON integer in [{self.minimum}, {self.maximum}]"
        if self.type is FieldType.NUMBER:
            return "JSON number, finite, as a double"
        low, high = (f"{t:%Y-%m-%d}" for t in EVENT_TIME_RANGE)
        return f"ISO 8601 with `Z` or an offset, from {low} until {high}"

    def read(self, message: Mapping[str, Any], where: str = "") -> Any:
        """The field's typed value in `message`; ProtocolError if it breaks the protocol."""
        path = where + self.name
        if self.name not in message or message[self.name] is None:
            if self.optional:
                return None
            raise ProtocolError(f"{path}: missing" if self.name not in message else f"{path}: null")
        return _READERS[self.type](self, path, message[self.name])


def _read_string(spec: Field, path: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _wrong(path, "a string", value)
    if spec.choices:
        if value not in spec.choices:
            raise ProtocolError(
                f"{path}: expected one of {', '.join(spec.choices)}, got {_show(value)}"
            )
        return value
    if not value:
        raise ProtocolError(f"{path}: empty string")
    if spec.max_length is not None and len(value) > spec.max_length:
        raise ProtocolError(
            f"{path}: string of {len(value):,} characters, longer than {spec.max_length}"
        )
    if _CONTROL.search(value):
        raise ProtocolError(f"{path}: control character in {_show(value)}")
    return value


def _read_integer(spec: Field, path: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _wrong(path, "an integer", value)
    assert spec.minimum is not None and spec.maximum is not None
    if not spec.minimum <= value <= spec.maximum:
        raise ProtocolError(
            f"{path}: integer {_show(value)} outside [{spec.minimum}, {spec.maximum}]"
        )
    return value


def _read_number(spec: Field, path: str, value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise _wrong(path, "a number", value)
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ProtocolError(f"{path}: number {_show(value)} does not fit a double")
    return number


def _read_timestamp(spec: Field, path: str, value: Any) -> int:
    """Microseconds since the epoch, UTC."""
    if not isinstance(value, str):
        raise _wrong(path, "an ISO 8601 timestamp string", value)
    match = _TIMESTAMP.fullmatch(value)
    if match is None:
        raise ProtocolError(
            f"{path}: expected an ISO 8601 timestamp like 2026-01-01T00:00:20.405Z, "
            f"got string {_show(value)}"
        )
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        moment = datetime.fromisoformat(
            f"{year}-{month}-{day}T{hour}:{minute}:{second}" + ("+00:00" if zone == "Z" else zone)
        ).astimezone(UTC)
    except ValueError as error:
        raise ProtocolError(f"{path}: {_show(value)} is no valid time ({error})") from None
    low, high = EVENT_TIME_RANGE
    if not low <= moment < high:
        raise ProtocolError(f"{path}: {_show(value)} outside {low:%Y}-{high:%Y}")
    return (moment - low) // timedelta(microseconds=1) + int((fraction or "0").ljust(6, "0")[:6])


_READERS: dict[FieldType, Callable[[Field, str, Any], Any]] = {
    FieldType.STRING: _read_string,
    FieldType.INTEGER: _read_integer,
    FieldType.NUMBER: _read_number,
    FieldType.TIMESTAMP: _read_timestamp,
}


def _id(name: str, meaning: str) -> Field:
    return Field(name, FieldType.STRING, meaning, max_length=ID_MAX_LENGTH)


SESSION_ID = _id("session_id", "the capture session; equal to the Kafka key")
SENSOR_ID = _id("sensor_id", "the sensor; equal to the topic's suffix")
SEQ = Field("seq", FieldType.INTEGER, "0, 1, 2 … within the session", minimum=0, maximum=SEQ_MAX)
KIND = Field(
    "kind", FieldType.STRING, "what the message does", choices=("snapshot", "update", "end")
)
EVENT_TIME = Field("event_time", FieldType.TIMESTAMP, "when the sensor produced it")
OP = Field(
    "op", FieldType.STRING, "`update` only: what it does to the row", choices=("upsert", "delete")
)
ROW_ID = _id("row_id", "the row of the session's table")

ENVELOPE = (SESSION_ID, SENSOR_ID, SEQ, KIND, EVENT_TIME)
"""Every message has these, in this order of checking."""

VALUE_FIELDS = (
    Field("temperature", FieldType.NUMBER, "°C", optional=True),
    Field("humidity", FieldType.NUMBER, "%", optional=True),
    Field("pressure", FieldType.NUMBER, "hPa", optional=True),
    Field("status", FieldType.STRING, "`ok`, `warn` or `fault` (judged by silver's suite)",
          optional=True, max_length=STATUS_MAX_LENGTH),
    Field("counter", FieldType.INTEGER, "a running count", optional=True,
          minimum=BIGINT_MIN, maximum=BIGINT_MAX),
)  # fmt: skip
"""A row's values. Each may be missing or null; fields not listed are ignored."""

VALUE_NAMES = tuple(f.name for f in VALUE_FIELDS)
NUMBER_NAMES = tuple(f.name for f in VALUE_FIELDS if f.type is FieldType.NUMBER)
VALUE_COLUMNS = ", ".join(f.column for f in VALUE_FIELDS)
"""The value columns of silver's row tables, typed as the protocol types them."""


@dataclass(frozen=True)
class Message:
    """A message that keeps the protocol, typed. `event_time` is microseconds since the
    epoch (UTC); `rows` maps row id to values for a snapshot, `values` is an upsert's."""

    session_id: str
    sensor_id: str
    seq: int
    kind: str
    event_time: int
    op: str | None = None
    row_id: str | None = None
    values: dict[str, Any] | None = None
    rows: dict[str, dict[str, Any]] | None = None


def doc_row(field: Field) -> str:
    """The field's row in the tables of docs/protocol.md."""
    optional = "may be missing or null" if field.optional else "required"
    return (
        f"| `{field.name}` | {field.type} | {field.rule} | {optional} | "
        f"{SPARK_TYPES[field.type]} | {field.meaning} |"
    )


class Unparsable(ProtocolError):
    """The bytes are not one JSON value in UTF-8."""


def decode(raw: bytes) -> Any:
    """The JSON value in a Kafka record's bytes: strict UTF-8 without a byte order mark,
    no repeated keys (readers disagree on which one wins), no NaN or Infinity."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise Unparsable(f"not UTF-8: {error}") from None
    if text.startswith("\ufeff"):
        raise Unparsable("not JSON: starts with a byte order mark")
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_not_json)
    except _RepeatedKey as error:
        raise ProtocolError(str(error)) from None
    except RecursionError:
        raise Unparsable("not JSON this reader can take: nested too deep") from None
    except ValueError as error:  # JSONDecodeError, or an integer of over 4,300 digits
        raise Unparsable(f"not JSON: {error}") from None


def _not_json(literal: str) -> Any:
    raise ValueError(f"{literal} is not a JSON number")


class _RepeatedKey(Exception):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    body = dict(pairs)
    if len(body) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _RepeatedKey(f"{_show(key)}: key repeated in one object")
            seen.add(key)
    return body


class UnknownKind(ProtocolError):
    """`kind` is none of the known kinds: a reason of its own, since a newer sensor may
    send kinds this code does not know yet."""


def parse_message(body: Any) -> Message:
    """Check a decoded JSON value against the protocol; ProtocolError names what breaks it."""
    if not isinstance(body, dict):
        raise Unparsable(f"not a JSON object: {_json_type(body)}")
    session_id, sensor_id, seq = (f.read(body) for f in ENVELOPE[:3])
    if KIND.name in body and body[KIND.name] not in KIND.choices:
        raise UnknownKind(f"kind: {_show(body[KIND.name])} is none of {', '.join(KIND.choices)}")
    kind, event_time = KIND.read(body), EVENT_TIME.read(body)
    message = Message(session_id, sensor_id, seq, kind, event_time)
    if kind == "snapshot":
        return _with(message, rows=_rows(body))
    if kind == "update":
        op = OP.read(body)
        if op == "delete":
            return _with(message, op=op, row_id=ROW_ID.read(body))
        row = _object(body, "row")
        return _with(message, op=op, row_id=ROW_ID.read(row, "row."), values=_values(row, "row."))
    return message


def _with(message: Message, **fields: Any) -> Message:
    return Message(**{**message.__dict__, **fields})


def _rows(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    if not isinstance(body.get("rows"), list):
        raise _wrong("rows", "an array", body.get("rows"), missing="rows" not in body)
    rows: dict[str, dict[str, Any]] = {}
    for index, item in enumerate(body["rows"]):
        where = f"rows[{index}]."
        if not isinstance(item, dict):
            raise _wrong(where[:-1], "an object", item)
        row_id = ROW_ID.read(item, where)
        if row_id in rows:
            raise ProtocolError(f"{where}row_id: {_show(row_id)} appears twice in the snapshot")
        rows[row_id] = _values(item, where)
    return rows


def _values(row: dict[str, Any], where: str) -> dict[str, Any]:
    values = _object(row, "values", where)
    return {f.name: f.read(values, f"{where}values.") for f in VALUE_FIELDS}


def _object(body: dict[str, Any], name: str, where: str = "") -> dict[str, Any]:
    value = body.get(name)
    if not isinstance(value, dict):
        raise _wrong(where + name, "an object", value, missing=name not in body)
    return value


def _wrong(path: str, expected: str, value: Any, missing: bool = False) -> ProtocolError:
    if missing:
        return ProtocolError(f"{path}: missing")
    shown = "" if isinstance(value, list | dict) or value is None else f" {_show(value)}"
    return ProtocolError(f"{path}: expected {expected}, got {_json_type(value)}{shown}")


_JSON_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
               (list, "array"), (dict, "object"))  # fmt: skip


def _json_type(value: Any) -> str:
    """The JSON name of a decoded value's type (bool before int: True is an int in Python)."""
    return next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), "null")


def _show(value: Any, limit: int = 40) -> str:
    """A short, printable rendering of a scalar for a violation's detail."""
    text = json.dumps(value[: limit + 1]) if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + "…"
