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

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

from lakehouse.core.errors import LakehouseError
from lakehouse.core.settings import EMBEDDED

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


@dataclass(frozen=True)
class Reached:
    """What a Spark application of the settings reaches, each resolved once: an embedded
    service's running address, else what the settings name."""

    metastore: str
    """`none`, `thrift://…` or `jdbc:…`."""
    master: str
    executor_python: str | None
    """The embedded cluster's executors' Python; None: the target's or this one."""
    s3_endpoint: str | None
    """None: the store's default endpoint, or a lake not on S3."""
    s3_keys: tuple[str, str]
    """Access and secret key; empty: the default provider chain, or a lake not on S3."""


def reached(settings: Settings) -> Reached:
    """Where a Spark application of `settings` finds its catalog, cluster and object store;
    one line naming the command to start an embedded one that is not running."""
    from lakehouse.services import s3
    from lakehouse.services.cluster import EmbeddedCluster
    from lakehouse.services.metastore import EmbeddedMetastore

    home = settings.storage.local_state_dir
    metastore, master, python = settings.catalog.metastore, settings.spark.master, None
    if metastore == EMBEDDED:
        metastore = running_address(EmbeddedMetastore.under(home), "catalog")
    if master == EMBEDDED:
        cluster = EmbeddedCluster.under(home)
        master, python = running_address(cluster, "cluster"), str(cluster.executor_python)
    endpoint, keys = None, ("", "")
    if settings.storage.root.startswith("s3a://"):
        endpoint, keys = s3.resolve_endpoint(settings), s3.credentials(settings)
    return Reached(metastore, master, python, endpoint, keys)
