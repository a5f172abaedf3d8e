"""Kafka: where it is and whether it answers, and an embedded broker (KRaft, combined
broker + controller) on 127.0.0.1.

It runs from the jars `make setup` resolved, as a separate JVM with its data, log, pid and
bootstrap address under `<local_state>/kafka/`. It exists for the demo and the tests; a
real deployment points `kafka.bootstrap_servers` at its own cluster.
"""

from __future__ import annotations

import base64
import os
import re
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from lakehouse.core.errors import LakehouseError, Unavailable, credentials_refused, explain
from lakehouse.core.settings import EMBEDDED, KafkaSettings, Settings
from lakehouse.services import jars, process, running_address, tls

_LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.console.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.apache.name = org.apache.kafka
logger.apache.level = WARN
"""


@dataclass(frozen=True)
class EmbeddedKafka:
    """The broker whose files live in `home`; stateless itself, so any process can stop it."""

    title: ClassVar[str] = "Kafka broker"
    home: Path
    users: tuple[tuple[str, str], ...] = ()
    """(user, password) pairs: with any, the broker also listens for SASL_SSL (PLAIN) and
    admits them there, with a certificate made at its first start (`sasl_address`)."""

    @classmethod
    def under(cls, local_state_dir: Path) -> EmbeddedKafka:
        return cls(local_state_dir / "kafka")

    def sasl_address(self) -> str | None:
        """`127.0.0.1:port` of the SASL_SSL listener while the broker runs with one."""
        address = self.home / "sasl_bootstrap"
        return address.read_text().strip() if self.address() and address.exists() else None

    @property
    def ca_file(self) -> Path:
        """The PEM clients trust the SASL_SSL listener's certificate by."""
        return tls.SelfSigned(self.home / "tls").ca_file

    @property
    def log_file(self) -> Path:
        return self.home / "broker.log"

    def address(self) -> str | None:
        """`127.0.0.1:port` while the broker runs, else None."""
        pid = self._pid()
        address = self.home / "bootstrap"
        if pid is None or not address.exists():
            return None
        return address.read_text().strip()

    def start(self, timeout_s: float = 90.0) -> str:
        """Start the broker unless it runs; return its bootstrap address once it serves."""
        running = self.address()
        if running:
            return running
        self.home.mkdir(parents=True, exist_ok=True)
        port, controller_port, sasl_port = self._ports()
        properties = self.home / "server.properties"
        text = _server_properties(self.home / "data", port, controller_port)
        if self.users:
            text = _with_sasl_ssl(text, sasl_port, self.users, *self._tls())
        # It may hold the users' passwords and the keystore's: this user's alone.
        properties.touch(mode=0o600)
        properties.chmod(0o600)
        properties.write_text(text)
        (self.home / "log4j2.properties").write_text(_LOG4J2)
        if not (self.home / "data" / "meta.properties").exists():
            self._java(
                "kafka.tools.StorageTool",
                "format",
                "--standalone",
                # One argument with `=`: a random id may begin with "-", which the tool
                # would otherwise read as an option.
                f"--cluster-id={_cluster_id()}",
                f"--config={properties}",
            )
        address = f"127.0.0.1:{port}"
        process.launch(
            "Kafka broker",
            self._java_command("kafka.Kafka", str(properties)),
            self.home / "broker.pid",
            self.log_file,
            lambda: _serves(address),
            timeout_s,
        )
        (self.home / "bootstrap").write_text(address)
        (self.home / "sasl_bootstrap").unlink(missing_ok=True)
        if self.users:
            (self.home / "sasl_bootstrap").write_text(f"127.0.0.1:{sasl_port}")
        return address

    def _tls(self) -> tuple[Path, str]:
        """The listener's keystore and its password, made at the first start: a key and a
        self-signed certificate for 127.0.0.1, which `ca_file` holds for clients to trust."""
        made = tls.SelfSigned(self.home / "tls").ensure("broker")
        return made.keystore, made.password()

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop the broker (SIGTERM, then SIGKILL); False if it was not running."""
        (self.home / "bootstrap").unlink(missing_ok=True)
        return process.stop(self.home / "broker.pid", timeout_s)

    def _pid(self) -> int | None:
        return process.running_pid(self.home / "broker.pid")

    def _ports(self) -> tuple[int, int, int]:
        # A restarted broker keeps its ports, so clients and checkpoints that know the
        # address find it again.
        port, controller = process.kept_ports(self.home / "ports", 2)
        (sasl,) = process.kept_ports(self.home / "sasl_port", 1) if self.users else (0,)
        return port, controller, sasl

    def _java_command(self, main_class: str, *args: str) -> list[str]:
        classpath = os.pathsep.join(str(j) for j in jars.jars("kafka"))
        return [
            "java",
            "-Xms128m",
            "-Xmx512m",
            "-XX:+UseG1GC",
            f"-Dlog4j2.configurationFile={self.home / 'log4j2.properties'}",
            "-cp",
            classpath,
            main_class,
            *args,
        ]

    def _java(self, main_class: str, *args: str) -> None:
        result = subprocess.run(
            self._java_command(main_class, *args), capture_output=True, text=True
        )
        if result.returncode != 0:
            raise LakehouseError(f"{main_class} failed: {explain(result.stderr)}")


def _server_properties(data: Path, port: int, controller_port: int) -> str:
    return f"""\
process.roles=broker,controller
node.id=1
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
controller.quorum.bootstrap.servers=127.0.0.1:{controller_port}
log.dirs={data}
num.partitions=3
auto.create.topics.enable=false
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
"""


def _with_sasl_ssl(
    properties: str, port: int, users: tuple[tuple[str, str], ...], keystore: Path, secret: str
) -> str:
    """`properties` with a SASL_SSL listener that admits `users` by PLAIN."""
    admitted = " ".join(f'user_{name}="{_quoted(password)}"' for name, password in users)
    jaas = f"{_LOGIN_MODULES['PLAIN']} required {admitted};"
    lines = {
        "listeners": f"{_value(properties, 'listeners')},SASL_SSL://127.0.0.1:{port}",
        "advertised.listeners": f"{_value(properties, 'advertised.listeners')},"
        f"SASL_SSL://127.0.0.1:{port}",
        "listener.security.protocol.map": f"{_value(properties, 'listener.security.protocol.map')}"
        ",SASL_SSL:SASL_SSL",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas,
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(keystore),
        "ssl.keystore.password": secret,
    }
    kept = [line for line in properties.splitlines() if line.split("=", 1)[0] not in lines]
    # A properties file reads a backslash as an escape: each is doubled, then JAAS reads its own.
    added = [f"{k}={v.replace(BACKSLASH, BACKSLASH * 2)}" for k, v in lines.items()]
    return "\n".join([*kept, *added]) + "\n"


BACKSLASH = "\\"


def _value(properties: str, key: str) -> str:
    return next(
        line.split("=", 1)[1] for line in properties.splitlines() if line.startswith(f"{key}=")
    )


def _cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _serves(address: str) -> bool:
    from confluent_kafka.admin import AdminClient

    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=1.0).close()
        AdminClient({"bootstrap.servers": address, "log_level": 0}).list_topics(timeout=2.0)
    except Exception:
        return False
    return True


def resolve_bootstrap(settings: Settings) -> str:
    """The configured bootstrap servers, or the running embedded broker's address."""
    if settings.kafka.bootstrap_servers != EMBEDDED:
        return settings.kafka.bootstrap_servers
    return running_address(EmbeddedKafka.under(settings.storage.local_state_dir), "kafka")


def check_reachable(bootstrap: str, timeout_s: float = 5.0) -> None:
    """Fail fast with one line when no bootstrap server accepts a connection.

    Without this a Kafka source retries for minutes before Spark reports a timeout.
    """
    failures = []
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=timeout_s).close()
            return
        except OSError as error:
            failures.append(f"{server.strip()} ({error.strerror or error})")
        except ValueError:
            failures.append(f"{server.strip()} (not host:port)")
    raise Unavailable(f"Kafka is unreachable: {'; '.join(failures)}")


_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def java_options(kafka: KafkaSettings) -> dict[str, str]:
    """The properties of Kafka's Java clients (Spark's source, as `kafka.<key>`)."""
    security = kafka.security
    found = {"security.protocol": security.protocol}
    if security.sasl:
        found["sasl.mechanism"] = security.mechanism
        found["sasl.jaas.config"] = (
            f"{_LOGIN_MODULES[security.mechanism]} required "
            f'username="{_quoted(security.username)}" password="{_quoted(security.password)}";'
        )
    if security.tls and security.ca_file:
        found["ssl.truststore.type"] = "PEM"
        found["ssl.truststore.location"] = security.ca_file
    return {**found, **kafka.options}


def client_options(kafka: KafkaSettings) -> dict[str, str]:
    """The configuration of librdkafka's clients (the producer, status, admin calls), but
    for `bootstrap.servers`."""
    security = kafka.security
    found = {"security.protocol": security.protocol}
    if security.sasl:
        found["sasl.mechanisms"] = security.mechanism
        found["sasl.username"] = security.username
        found["sasl.password"] = security.password
    if security.tls and security.ca_file:
        found["ssl.ca.location"] = security.ca_file
    return {**found, **kafka.options}


def _quoted(value: str) -> str:
    """`value` inside a JAAS configuration's double quotes, where `\\` escapes."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _topics(consumer: Any, refused: list[str], where: str, timeout_s: float = 10.0) -> Any:
    """The broker's topics; a refusal of the credentials ends the wait at once."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return consumer.list_topics(timeout=1).topics
        except KafkaException as error:
            consumer.poll(0)  # serves the errors met meanwhile to the error callback
            if refused:
                raise LakehouseError(credentials_refused(refused[-1])) from None
            if time.monotonic() > deadline:
                raise Unavailable(f"Kafka at {where} unreachable: {error}") from None


def watermarks(settings: Settings) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (earliest, end) offsets in the broker, for every topic of the
    sensors' pattern."""
    from confluent_kafka import TopicPartition

    with _reader(settings, "lakehouse-watermarks") as (consumer, refused, where):
        topics = _topics(consumer, refused, where)
        pattern = re.compile(settings.kafka.topic_pattern)
        ends = {}
        for topic, meta in sorted(topics.items()):
            if not pattern.search(topic):
                continue
            for partition in sorted(meta.partitions):
                ends[(topic, partition)] = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=10
                )
        return ends


def record_times(
    settings: Settings, offsets: Mapping[tuple[str, int], int], timeout_s: float = 10.0
) -> dict[tuple[str, int], datetime]:
    """(topic, partition) -> the Kafka timestamp of the record at its offset in `offsets`,
    for those the broker holds: how long the oldest record a reader has not read waited."""
    from confluent_kafka import TopicPartition

    found: dict[tuple[str, int], datetime] = {}
    if not offsets:
        return found
    with _reader(settings, "lakehouse-record-times") as (consumer, refused, where):
        _topics(consumer, refused, where)
        consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in offsets.items()])
        deadline = time.monotonic() + timeout_s
        while len(found) < len(offsets) and time.monotonic() < deadline:
            record = consumer.poll(0.5)
            if record is None or record.error():
                continue
            key = (record.topic(), record.partition())
            if key not in found:
                found[key] = datetime.fromtimestamp(record.timestamp()[1] / 1000, UTC)
                consumer.pause([TopicPartition(*key)])
    return found


def offsets_naming(
    settings: Settings,
    topic: str,
    partition: int,
    first: int,
    last: int,
    names: Callable[[bytes | None, bytes | None], bool],
    timeout_s: float = 30.0,
) -> tuple[list[int], str]:
    """The offsets from `first` to `last` of one partition whose record `names` accepts (by
    its key and value), as the broker holds them now, and a note where it no longer holds
    all of the range."""
    from confluent_kafka import TopicPartition

    check_reachable(resolve_bootstrap(settings))
    found: list[int] = []
    with _reader(settings, "lakehouse-explain") as (consumer, refused, where):
        _topics(consumer, refused, where)
        earliest, end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        start, stop = max(first, earliest), min(last, end - 1)
        note = f"the broker no longer holds offsets before {earliest:,}" if earliest > first else ""
        if start > stop:
            return found, note
        consumer.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            batch = consumer.consume(10_000, 1.0)
            for record in batch:
                if record.error():
                    continue
                if record.offset() > stop:
                    return found, note
                if names(record.key(), record.value()):
                    found.append(record.offset())
            if batch and batch[-1].offset() >= stop:
                return found, note
    raise LakehouseError(
        f"{topic}/{partition}: offsets {start:,}..{stop:,} not read within {timeout_s:.0f} s"
    )


@contextmanager
def _reader(settings: Settings, group: str) -> Iterator[tuple[Any, list[str], str]]:
    """A consumer of the broker that never joins its group or commits, the refusals of its
    credentials as they come, and the address it reaches."""
    from confluent_kafka import Consumer, KafkaError

    refused: list[str] = []

    def note(error: KafkaError) -> None:
        if error.code() == KafkaError._AUTHENTICATION:
            refused.append(error.str())

    config = {
        **client_options(settings.kafka),
        "bootstrap.servers": resolve_bootstrap(settings),
        "group.id": group,
        "enable.auto.commit": False,
        "error_cb": note,
        "log_level": 0,  # what goes wrong is raised here, in a line, not printed by librdkafka
    }
    consumer = Consumer(config)
    try:
        yield consumer, refused, str(config["bootstrap.servers"])
    finally:
        consumer.close()
