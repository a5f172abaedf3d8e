"""Where Kafka is, and whether it answers, before a job builds a stream on it."""

from __future__ import annotations

import socket

from lakehouse.errors import LakehouseError
from lakehouse.kafka_broker import EmbeddedKafka
from lakehouse.settings import EMBEDDED, Settings


def resolve_bootstrap(settings: Settings) -> str:
    """The configured bootstrap servers, or the running embedded broker's address."""
    if settings.kafka.bootstrap_servers != EMBEDDED:
        return settings.kafka.bootstrap_servers
    broker = EmbeddedKafka.under(settings.storage.local_state_dir)
    address = broker.bootstrap()
    if address is None:
        raise LakehouseError(
            f"the embedded Kafka broker is not running (state in {broker.home}); "
            "start it with `lakehouse kafka start`"
        )
    return address


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
    raise LakehouseError(f"Kafka is unreachable: {'; '.join(failures)}")
