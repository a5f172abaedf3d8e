"""Errors a person reads: one line that says what happened and where.

`explain` is the one place that turns a failure into that line, and it reads the failure
by its cause: the chain of Java exceptions behind a PySpark error (the query's exception,
`Py4JJavaError.java_exception`, every `getCause()` and suppressed exception), classified by
exception class and the service it addresses. Text is read only where Spark hands over
nothing else: a Python traceback (a worker's, or one raised in `foreachBatch`) and a tool's
stderr. Even there the Java exceptions a trace prints (`Caused by: <class>: <message>`)
are read back into the same chain, so that one set of rules judges both.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


class LakehouseError(Exception):
    """A failure the CLI reports as one line and a non-zero exit, without a traceback."""


class SettingsError(LakehouseError):
    """Configuration that cannot be used: names the key and the file it came from."""


class Explained(LakehouseError):
    """A failure explained where its cause chain was at hand (e.g. inside a micro-batch,
    before Spark turns it into a Python traceback's text): its message is the line."""


class Unavailable(Explained):
    """A service that did not answer (the broker, object storage) or an executor lost: a
    failure a restart may outlive, where any other failure would fail again."""


@dataclass(frozen=True)
class Thrown:
    """One exception of a failure's cause chain, outermost first."""

    name: str
    """Its class, fully qualified: `java.net.ConnectException`,
    `lakehouse.storage.lease.LeaseRefused`."""
    message: str
    condition: str | None = None
    """Spark's error condition (`CAST_INVALID_INPUT`) when it is a `SparkThrowable`."""


def explain(error: BaseException | str, checkpoint: str = "its checkpoint") -> str:
    """The one line of a failure that says what happened: never only a query's id, which
    is all Spark's own first line of a stream failure names."""
    chain = cause_chain(error)
    return describe(chain, checkpoint) or first_line(error)


def cause_chain(error: BaseException | str) -> list[Thrown]:
    """Every exception behind `error`: walked in the JVM when it came from there, else read
    from the traces its text prints; the Python traces inside a Java message are read too."""
    if isinstance(error, str):
        return parse_trace(error)
    java = _java_exception(error)
    if java is None:
        kind = type(error)
        return [
            Thrown(f"{kind.__module__}.{kind.__qualname__}", str(error)),
            *parse_trace(_text(error)),
        ]
    chain = []
    for thrown in _walk(java):
        # Spark gives a Python failure (in foreachBatch, in a worker) as its traceback's
        # text, inside the message of whichever Java exception carries it.
        chain += [thrown, *parse_trace(thrown.message)]
    return chain


def describe(chain: list[Thrown], checkpoint: str = "its checkpoint") -> str | None:
    """The line for a cause chain, by the first rule that knows it; None if none does."""
    for rule in (
        _state_schema,
        _own_error,
        _kafka_data_loss,
        _unreachable,
        _kafka,
        _spark_condition,
        _python_error,
    ):
        if line := rule(chain, checkpoint):
            return line[:500]
    return None


def transient(error: BaseException | str) -> bool:
    """Whether a restart from the checkpoint may outlive `error`: a service that did not
    answer, Kafka timing out, an executor lost. Never the project's own refusals (a `fail`
    expectation, a lease held elsewhere, a checkpoint that does not fit), a loss of Kafka
    data or a state schema: they fail the same way again."""
    if isinstance(error, LakehouseError):
        return isinstance(error, Unavailable)
    if _server_failed(error):
        return True
    chain = cause_chain(error)
    own = [t for t in chain if t.name.startswith(_OWN_PACKAGES)]
    if own:  # the project's own word, raised in a batch and read back from its trace
        return own[-1].name == _UNAVAILABLE
    if _state_schema(chain, "") or _kafka_data_loss(chain, ""):
        return False
    return any(
        t.name in _NO_ANSWER or t.name in _RETRIABLE or _LOST_EXECUTOR.search(t.message)
        for t in chain
    )


def _server_failed(error: BaseException | str) -> bool:
    """An S3 client's error for a 5xx answer (InternalError, ServiceUnavailable, SlowDown):
    the server's own failure, which S3A retries as `AWSStatus500Exception` and which the
    lease client meets too (a server restarting answers 500 before its storage is up)."""
    response = getattr(error, "response", None)
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode") if response else None
    return isinstance(status, int) and status >= 500


def first_line(error: BaseException | str) -> str:
    text = error if isinstance(error, str) else _text(error)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:500] if lines else "unknown error"


def parse_trace(text: str) -> list[Thrown]:
    """The exceptions a printed trace names, in its order: Java's `<class>: <message>`,
    `Caused by:` and `Suppressed:` lines, py4j's `: <class>: ...` and Python's own
    `<module>.<Class>: <message>` lines."""
    found = []
    for name, message in _TRACE_LINE.findall(text):
        if name.endswith(_EXCEPTION_SUFFIXES) or name.startswith(_OWN_PACKAGES):
            found.append(Thrown(name, message.strip(), _condition_of(message)))
    return found


def _condition_of(message: str) -> str | None:
    """Spark's condition as every SparkThrowable's message opens: `[CONDITION] ...`."""
    found = re.match(r"\[([A-Z][A-Z0-9_]+(?:\.[A-Z0-9_]+)*)\] ", message)
    return found[1] if found else None


_TRACE_LINE = re.compile(
    r"^\s*(?:Caused by: |Suppressed: |: )?((?:[A-Za-z_$][\w$]*\.)*[A-Z][\w$]*): (.*)$", re.M
)
_EXCEPTION_SUFFIXES = ("Exception", "Error", "Throwable")
_OWN_PACKAGES = ("lakehouse.", "bronze.", "silver.", "gold.")
# Spark's wrappers name where an error surfaced, not what it was.
_WRAPPERS = ("STREAM_FAILED", "FOREACH_BATCH_USER_FUNCTION_ERROR", "TASK_WRITE_FAILED")
# Classes that mean a service did not answer: refused, unreachable, or gone mid-request.
_NO_ANSWER = (
    "java.net.ConnectException",
    "java.net.NoRouteToHostException",
    "java.net.UnknownHostException",
    "java.net.SocketTimeoutException",
    "java.net.SocketException",
    "org.apache.http.conn.HttpHostConnectException",
    "org.apache.http.conn.ConnectTimeoutException",
    "org.apache.http.NoHttpResponseException",
    # The Python S3 client the leases use, refused, timed out or cut off alike.
    "botocore.exceptions.EndpointConnectionError",
    "botocore.exceptions.ConnectTimeoutError",
    "botocore.exceptions.ReadTimeoutError",
    "botocore.exceptions.ConnectionClosedError",
)
# Failures of a client that a later call may not meet: Kafka's retriable errors, S3A's
# and the AWS SDK's for a request that got no (or a server's) answer.
_RETRIABLE = (
    "org.apache.kafka.common.errors.TimeoutException",
    "org.apache.kafka.common.errors.DisconnectException",
    "org.apache.kafka.common.errors.NetworkException",
    "org.apache.kafka.common.errors.NotLeaderOrFollowerException",
    "org.apache.kafka.common.errors.LeaderNotAvailableException",
    "org.apache.hadoop.fs.s3a.AWSClientIOException",
    "org.apache.hadoop.fs.s3a.AWSStatus500Exception",
    "org.apache.hadoop.fs.s3a.AWSServiceThrottledException",
    "software.amazon.awssdk.core.exception.SdkClientException",
    "software.amazon.awssdk.core.exception.ApiCallTimeoutException",
    "software.amazon.awssdk.core.exception.ApiCallAttemptTimeoutException",
)
# Kafka refusing who connects: a restart would be refused alike.
_REFUSED_CREDENTIALS = (".SaslAuthenticationException", ".SslAuthenticationException")
_LOST_EXECUTOR = re.compile(r"ExecutorLostFailure|executor \S+ (?:was )?lost", re.I)
_UNAVAILABLE = f"{__name__}.{Unavailable.__name__}"
# The SQL guard (jvm/src/lakehouse/sql) refuses a plan with this class, worded `read-only: `.
_GUARD = "java.lang.UnsupportedOperationException"
_STATE_SCHEMA = re.compile(r"STATE_STORE_\w*SCHEMA\w*NOT_COMPATIBLE|STATE_VERSION_MISMATCH\w*")
_S3_CLIENT = ("org.apache.hadoop.fs.s3a.", "software.amazon.awssdk.", "botocore.")


def _state_schema(chain: list[Thrown], checkpoint: str) -> str | None:
    found = _first(t for t in chain if _STATE_SCHEMA.fullmatch((t.condition or "").split(".")[0]))
    if found is None:
        return None
    return (
        f"the state in {checkpoint} was written with another state schema than this code "
        "uses; state cannot be migrated in place: rebuild from the upstream table on a new "
        "checkpoint (`lakehouse run silver --full-refresh`). Spark said: "
        + first_line(found.message)
    )


def _own_error(chain: list[Thrown], _checkpoint: str) -> str | None:
    """The project's own errors say what happened in their own words; raised in a worker
    or in a batch, they reach here as a Python traceback's lines (the last is the latest)."""
    refused = _first(t for t in chain if t.name == _GUARD and t.message.startswith("read-only: "))
    if refused is not None:
        return first_line(refused.message)
    own = [t for t in chain if t.name.startswith(_OWN_PACKAGES)]
    if not own:
        return None
    last = own[-1]
    if last.name in (f"{__name__}.{Explained.__name__}", _UNAVAILABLE):
        return last.message
    return f"{last.name.rsplit('.', 1)[-1]}: {last.message}"


# What Spark's Kafka source says of a loss (KAFKA_DATA_LOSS's reasons, and the consumer's
# own "Cannot fetch offset"), as (topic, partition, first lost offset, first offset after).
_LOST_RANGES = (
    re.compile(r"offset \[(?P<first>\d+), (?P<after>\d+)\) for topic partition (?P<tp>\S+)"),
    re.compile(
        r"Starting offset for (?P<tp>\S+) was (?P<first>\d+) but \S+ reset to (?P<after>\d+)"
    ),
    re.compile(r"Cannot fetch offset (?P<first>\d+) \(.*?TopicPartition: (?P<tp>[^)\s,]+)"),
    re.compile(r"Added partition (?P<tp>\S+) starts from (?P<after>\d+) instead of (?P<first>0)"),
)
_GONE = re.compile(r"Partitions (?P<tps>.*?) have been deleted")
_WENT_BACK = re.compile(
    r"Partition (?P<tp>\S+) offset was changed from (?P<first>\d+) to (?P<after>\d+)"
)
_TOPIC_PARTITION = re.compile(r"(?P<topic>[A-Za-z0-9._-]+)-(?P<partition>\d+)")


def _topic_partition(text: str) -> tuple[str, int]:
    topic, _, partition = text.rstrip(".,").rpartition("-")
    return topic, int(partition)


def _lost_range(text: str) -> tuple[str, int, int, int | None] | None:
    """(topic, partition, first lost offset, first offset Kafka still holds or None) that a
    message of Spark's Kafka source names, if it names one."""
    for pattern in _LOST_RANGES:
        if found := pattern.search(text):
            after = found.groupdict().get("after")
            return (
                *_topic_partition(found["tp"]),
                int(found["first"]),
                int(after) if after else None,
            )
    return None


def credentials_refused(detail: str) -> str:
    """The line for Kafka refusing who connects, as its Java or librdkafka client says."""
    return (
        "Kafka refused the credentials of kafka.security (user and password, mechanism, "
        f"protocol): {detail}"
    )


def topics_gone(topics: list[str]) -> str:
    """The line for Kafka topics deleted under a stream that reads them."""
    return (
        f"Kafka topic {', '.join(topics)} is gone (deleted) with records this stream may not "
        "have read; nothing was skipped. If its sensor is decommissioned: `lakehouse bronze "
        f"retire-topic {topics[0]}` (docs/operations.md, 'When Kafka changes under bronze')"
    )


def _kafka_change(text: str) -> str | None:
    """The line for a topic gone or made again, if `text` is Spark's report of one."""
    if gone := _GONE.search(text):
        topics = sorted({m["topic"] for m in _TOPIC_PARTITION.finditer(gone["tps"])})
        if topics:
            return topics_gone(topics)
    if back := _WENT_BACK.search(text):
        topic, partition = _topic_partition(back["tp"])
        return (
            f"Kafka topic {topic} partition {partition} now ends at offset "
            f"{int(back['after']):,}, below offset {int(back['first']):,} this stream reads "
            "next: the topic was deleted and made again? Nothing of it was read; to ingest it "
            f"as a new incarnation: `lakehouse bronze accept-recreated {topic}` "
            "(docs/operations.md, 'When Kafka changes under bronze')"
        )
    return None


def _kafka_data_loss(chain: list[Thrown], _checkpoint: str) -> str | None:
    found = _first(
        t
        for t in chain
        if (t.condition or "").startswith("KAFKA_DATA_LOSS")
        or t.name.endswith(".OffsetOutOfRangeException")
        # Spark's Kafka source reports a loss as a bare IllegalStateException: its words.
        or "Some data may have been lost" in t.message
    )
    if found is None:
        return None
    if changed := _first(line for t in chain if (line := _kafka_change(t.message))):
        return changed
    named = next((r for t in chain if (r := _lost_range(t.message)) is not None), None)
    if named is None:
        return (
            "Kafka no longer has offsets this stream has not read yet (aged out by retention "
            "or the topic was deleted); nothing was skipped. Spark said: "
            + first_line(found.message)
        )
    return offsets_lost(*named)


def offsets_lost(topic: str, partition: int, first: int, after: int | None) -> str:
    """The line for offsets `first`..`after` - 1 of a partition that Kafka no longer holds
    and a stream has not read (`after` None: not known where they end)."""
    missing = (
        f"offsets {first:,}..{after - 1:,}" if after is not None else f"offsets from {first:,}"
    )
    return (
        f"Kafka no longer holds {missing} of {topic} partition {partition}, which this "
        "stream has not read (aged out by retention, or deleted); nothing was skipped and "
        "every row already written is kept. To go on from Kafka's earliest offset, "
        f"recording the loss: `lakehouse bronze accept-loss {topic} {partition}` "
        "(docs/operations.md, 'When Kafka changes under bronze')"
    )


def _unreachable(chain: list[Thrown], _checkpoint: str) -> str | None:
    """A service that did not answer, named by the client that called it."""
    silent = [t for t in chain if t.name in _NO_ANSWER]
    if not silent:
        return None
    # By the client that called first; a path only where no client says (a stream on a
    # Kafka topic may name its s3a:// checkpoint in a message of its failure).
    if any(t.name.startswith(_S3_CLIENT) for t in chain):
        return _storage_unreachable(chain, silent)
    if any(t.name.startswith("org.apache.kafka.") for t in chain):
        return f"the Kafka broker did not answer (is it up?): {silent[-1].message}"
    if any("s3a://" in t.message for t in chain):
        return _storage_unreachable(chain, silent)
    return None


def _storage_unreachable(chain: list[Thrown], silent: list[Thrown]) -> str:
    # Where and what, from the messages: the HTTP client names the address it tried, S3A
    # words every failure it translates as `<operation> on <path>: <cause>`.
    address = _first(
        m[1] or m[2]
        for t in chain
        if (m := re.search(r"Connect to (\S+)|endpoint URL: \"https?://([^/\"]+)", t.message))
    )
    call = _first(
        m
        for t in chain
        if (t.name in _NO_ANSWER or t.name.startswith(_S3_CLIENT) or "s3a://" in t.message)
        and (m := re.match(r"(?:.*terminated with exception: )?(.+?) on (\S+): ", t.message))
    )
    where = f" at {address}" if address else ""
    what = ""
    if call is not None:
        operation = re.sub(r"^(\w+)\(.*\)$", r"\1()", call[1])
        what = f" {operation} on {call[2]}"
    why = f" ({silent[-1].message.strip()})" if silent[-1].message.strip() else ""
    return f"object storage{where} did not answer{what}{why}: is the S3 server up?"


def _kafka(chain: list[Thrown], _checkpoint: str) -> str | None:
    kafka = [t for t in chain if t.name.startswith("org.apache.kafka.")]
    if not kafka:
        return None
    if refused := _first(t for t in kafka if t.name.endswith(_REFUSED_CREDENTIALS)):
        return credentials_refused(first_line(refused.message))
    if any(t.name == "org.apache.kafka.common.errors.TimeoutException" for t in kafka):
        return "Kafka did not answer in time (is the broker up?): " + first_line(kafka[-1].message)
    return f"Kafka: {kafka[-1].name.rsplit('.', 1)[-1]}: {first_line(kafka[-1].message)}"


def _spark_condition(chain: list[Thrown], _checkpoint: str) -> str | None:
    """`[CONDITION] message` of the innermost Spark error that is not a wrapper."""
    found = [t for t in chain if t.condition and t.condition not in _WRAPPERS]
    if not found:
        return None
    message = first_line(found[-1].message)
    message = re.sub(r"^\[[A-Z0-9_.]+\] ", "", message).split(" SQLSTATE:")[0].strip()
    return f"[{found[-1].condition}] {message}"


def _python_error(chain: list[Thrown], _checkpoint: str) -> str | None:
    """The `SomeError: message` a Python worker, a tool or foreachBatch raised last."""
    useful = [
        t
        for t in chain
        if not t.name.startswith(("py4j.", "org.apache.spark.", "java.lang.reflect."))
        and not t.name.endswith(("Py4JJavaError", "PythonException", "StreamingQueryException"))
    ]
    if not useful:
        return None
    return f"{useful[-1].name.rsplit('.', 1)[-1]}: {first_line(useful[-1].message)}"


def _java_exception(error: BaseException) -> Any:
    """The JVM's exception behind a PySpark error: a captured one keeps it as `_origin`,
    a `Py4JJavaError` as `java_exception`."""
    return getattr(error, "java_exception", None) or getattr(error, "_origin", None)


def _walk(java: Any, limit: int = 64) -> Iterator[Thrown]:
    """Breadth first through causes and suppressed exceptions, each once."""
    from py4j.protocol import Py4JError

    pending, seen = [java], set[int]()
    while pending and len(seen) < limit:
        thrown = pending.pop(0)
        identity = thrown.hashCode()  # Throwable does not override it: identity in the JVM
        if identity in seen:
            continue
        seen.add(identity)
        message = str(thrown.getMessage() or "")
        try:
            condition = thrown.getCondition() or _condition_of(message)  # a SparkThrowable
        except Py4JError:
            # A task's failure reaches the driver as another class quoting it.
            condition = _condition_of(message)
        yield Thrown(thrown.getClass().getName(), message, condition)
        if (cause := thrown.getCause()) is not None:
            pending.append(cause)
        pending.extend(thrown.getSuppressed())


def _text(error: BaseException) -> str:
    # A PySpark error's own message first, then everything str() gives (its JVM trace).
    message = getattr(error, "getMessage", None)
    own = str(message()) if callable(message) else ""
    return "\n".join(part for part in (own, str(error)) if part) or type(error).__name__


def _first(items: Iterator[Any]) -> Any:
    return next(items, None)
