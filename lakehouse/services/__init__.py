"""The embedded services of this machine: a Kafka broker, a metastore, an S3 server and a
Spark standalone cluster.

Each keeps its data, log, pid and ports in a folder of its own under `storage.local_state`,
so any process can find, reuse or stop it, and a restarted one keeps its address. They
share one shape (`Service`), one CLI handler (`lakehouse <service> start|stop|status`) and
one set of process helpers (`process`); each says only what is particular to it. They
exist for the demo and the tests: a real deployment points the settings at its own
Kafka, metastore and object store.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

from lakehouse.core.errors import LakehouseError

if TYPE_CHECKING:
    from lakehouse.core.settings import Settings


class Service(Protocol):
    title: ClassVar[str]
    """What it is, for people: `Kafka broker`."""

    @property
    def home(self) -> Path:
        """Its folder: data, log, pid and ports."""

    @property
    def log_file(self) -> Path: ...

    def address(self) -> str | None:
        """Where clients reach it while it runs, else None."""

    def start(self) -> str:
        """Start it unless it runs; its address once it serves."""

    def stop(self) -> bool:
        """Stop it; False if it was not running."""


def running_address(service: Service, command: str) -> str:
    """The address of an embedded service the settings point at, or one line saying it is
    not running and the command (`lakehouse <command> start`) that starts it."""
    address = service.address()
    if address is None:
        raise LakehouseError(
            f"the embedded {service.title} is not running (state in {service.home}); "
            f"start it with `lakehouse {command} start`"
        )
    return address


def embedded(settings: Settings) -> dict[str, Service]:
    """The embedded services by CLI name, each with its state under the settings' folder."""
    from lakehouse.services.cluster import EmbeddedCluster
    from lakehouse.services.kafka import EmbeddedKafka
    from lakehouse.services.metastore import EmbeddedMetastore
    from lakehouse.services.s3 import EmbeddedS3

    home = settings.storage.local_state_dir
    return {
        "kafka": EmbeddedKafka.under(home),
        "catalog": EmbeddedMetastore.under(home),
        "s3": EmbeddedS3.under(home, settings.s3.access_key, settings.s3.secret_key),
        "cluster": EmbeddedCluster.under(
            home,
            settings.cluster.workers,
            settings.cluster.cores_per_worker,
            settings.cluster.memory_per_worker,
        ),
    }
