"""Errors a person reads: one line that says what happened and where.

`explain` is the one place that turns a failure's text (a Spark or Py4J trace, a worker's
traceback, a tool's stderr) into that line.
"""

from __future__ import annotations

import re


class LakehouseError(Exception):
    """A failure the CLI reports as one line and a non-zero exit, without a traceback."""


class SettingsError(LakehouseError):
    """Configuration that cannot be used: names the key and the file it came from."""


def explain(error: BaseException | str, checkpoint: str = "its checkpoint") -> str:
    """The one line of a failure that says what happened: never only a query's id, which
    is all Spark's own first line of a stream failure names."""
    text = error if isinstance(error, str) else _text(error)
    if re.search(r"STATE_STORE_\w*SCHEMA\w*NOT_COMPATIBLE|STATE_VERSION_MISMATCH", text):
        return (
            f"the state in {checkpoint} was written with another state schema than this "
            "code uses; state cannot be migrated in place: move the checkpoint aside and "
            "rerun to rebuild from the upstream table on a new checkpoint. Spark said: "
            + first_line(text.split("exception: ")[-1])
        )
    if re.search(r"KAFKA_DATA_LOSS|OffsetOutOfRange|Some data may have been lost", text):
        return (
            "Kafka no longer has offsets this stream has not read yet (aged out by retention "
            "or the topic was deleted); nothing was skipped. Reset deliberately by moving "
            "the checkpoint aside. Spark said: " + first_line(text)
        )
    if re.search(r"org\.apache\.kafka\S*TimeoutException|Timed out waiting for a node", text):
        return "Kafka did not answer in time (is the broker up?): " + first_line(text)
    if unreachable := _storage_unreachable(text):
        return unreachable
    if "read-only: " in text:  # refused by the SQL extension: its own words suffice
        return "read-only: " + text.split("read-only: ", 1)[1].splitlines()[0]
    return _own_error(text) or _spark_error(text) or _python_error(text) or first_line(text)


def first_line(error: BaseException | str) -> str:
    text = error if isinstance(error, str) else _text(error)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:500] if lines else "unknown error"


def _text(error: BaseException) -> str:
    # A PySpark error's own message first, then everything str() gives (its JVM trace, where
    # a cause such as the SQL extension's refusal may be all that names what happened).
    message = getattr(error, "getMessage", None)
    own = str(message()) if callable(message) else ""
    return "\n".join(part for part in (own, str(error)) if part) or type(error).__name__


# Spark's wrappers name where an error surfaced, not what it was.
_WRAPPERS = ("STREAM_FAILED", "FOREACH_BATCH_USER_FUNCTION_ERROR", "TASK_WRITE_FAILED")


def _storage_unreachable(text: str) -> str | None:
    """S3A's words for an object store that does not answer: what it tried, on which path."""
    # `listObjects() on s3a://bucket/key`, or a call on a bare key: `copyFile(a, b) on key`;
    # S3A's exception class names it, or a stream's failure quotes it without its class.
    call = re.search(
        r"(?:java\.net\.\w+Exception|terminated with exception): "
        r"(\w+)(?:\([^)]*\))? on ((?:s3a://)?[^:\s]+): ",
        text,
    )
    if call is None or "Unable to execute HTTP request" not in text:
        return None  # e.g. no credentials: the general rules name it
    address = re.search(r"Connect to (\S+)", text)
    reason = re.findall(r"Caused by: java\.net\.\w+Exception: ([^\n]+)", text)
    where = f" at {address[1]}" if address else ""
    why = f" ({reason[-1].strip()})" if reason else ""
    return (
        f"object storage{where} did not answer {call[1]}() on {call[2]}{why}: is the S3 server up?"
    )


def _own_error(text: str) -> str | None:
    """The project's own one-line errors, raised in a worker or in foreachBatch: Python
    names them by module, e.g. `lakehouse.lease.LeaseRefused: ...`."""
    found = re.findall(r"^(?:lakehouse|bronze|silver|gold)\.[\w.]*?(\w+: .+)$", text, re.MULTILINE)
    return found[-1].strip()[:500] if found else None


def _spark_error(text: str) -> str | None:
    """`[ERROR_CLASS] message` of the innermost Spark error that is not a wrapper."""
    found = [
        (name, message)
        for name, message in re.findall(r"\[([A-Z][A-Z0-9_]+(?:\.[A-Z0-9_]+)*)\] ([^\n]+)", text)
        if name not in _WRAPPERS
    ]
    if not found:
        return None
    name, message = found[-1]
    return f"[{name}] {message.split(' SQLSTATE:')[0].strip()}"[:500]


def _python_error(text: str) -> str | None:
    """The `SomeError: message` line a Python worker, a tool or foreachBatch raised."""
    found = re.findall(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception): .+)$", text, flags=re.MULTILINE)
    useful = [line for line in found if not line.startswith(("Py4JJavaError", "PythonException"))]
    return useful[-1].strip()[:500] if useful else None
