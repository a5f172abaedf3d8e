"""Settings: the only module that reads `conf/*.yaml` or the environment.

`conf/base.yaml` holds every key; a target file (`conf/local.yaml`, `conf/cluster.yaml`)
overrides some of them; then environment variables override single keys by path,
`LAKEHOUSE__KAFKA__BOOTSTRAP_SERVERS=host:9092`. String values may name environment
variables as `${NAME}` so that secrets stay out of the files. An unknown key, a wrong
type, an unset variable or a value that can only be wrong (a `Rule` in the field's
`Annotated` type: a count of 0, a negative time, a regex that does not compile) is a
`SettingsError` naming the key and where it came from, raised before anything runs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from lakehouse import PROJECT_ROOT
from lakehouse.core import loader
from lakehouse.core.errors import SettingsError
from lakehouse.core.loader import Convert, Rule

ENV_PREFIX = "LAKEHOUSE__"
TARGET_ENV = "LAKEHOUSE_TARGET"
CONF_DIR_ENV = "LAKEHOUSE_CONF_DIR"
EMBEDDED = "embedded"


def _compiles(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True


# What Spark's processingTime trigger reads (months and years it refuses for a trigger).
_INTERVAL = re.compile(
    r"(?i)\s*(interval\s+)?"
    r"((\d+\s+(week|day|hour|minute|millisecond|microsecond)s?|\d+(\.\d+)?\s+seconds?)\s*)+"
)

Positive = Rule(lambda v: v > 0, "must be greater than 0")
NotNegative = Rule(lambda v: v >= 0, "must be 0 or more")
Port = Rule(lambda v: 0 < v < 65536, "must be a port from 1 to 65535")
Regex = Rule(_compiles, "must be a regular expression that compiles")
Interval = Rule(
    lambda v: _INTERVAL.fullmatch(v) is not None,
    "must be an interval Spark reads, such as '5 seconds' or '500 milliseconds'",
)


def _as_uri(root: str) -> str:
    """A scheme-less root is a local folder, relative to the project."""
    if "://" in root:
        return root.rstrip("/")
    return (PROJECT_ROOT / root).resolve().as_uri()


LakeRoot = Convert(_as_uri)
"""A lake's root as a URI."""


@dataclass(frozen=True)
class SparkSettings:
    master: str
    """`local[N]`, a cluster's URL, or `embedded` for `lakehouse cluster start`'s."""
    app_name: str
    shuffle_partitions: Annotated[int, Positive]
    driver_memory: str
    log_level: str
    conf: dict[str, str]
    class_data_dir: str
    """Folder of the driver JVMs' class-data archives (`runtime/class_data.py`), in the
    project unless absolute; `none`: every JVM reads its classes from the jars."""


@dataclass(frozen=True)
class StorageSettings:
    root: Annotated[str, LakeRoot]
    """URI under which every table and checkpoint lives (`file:///…`, `s3a://bucket/prefix`)."""
    local_state: str
    """Local folder for the embedded services of this machine (broker data, pid files)."""
    lease_seconds: Annotated[float, Positive]
    """On S3, how long a writer's lease of its tables lasts unless renewed (every third of
    it): how soon another writer may take over from one that crashed. A writer begins no
    batch with less than half of it left (`storage/lease.py`, `fence_margin_s`)."""
    versions: Mapping[str, str] = field(default_factory=dict, metadata={"from_lake": True})
    """Not a setting: table or stream name -> what the folders of the version a command
    works on add to it (`__v2`; none for the first), from the lake's versions
    (`core/versions.py`, `lakehouse shadow`)."""

    def table_uri(self, name: str) -> str:
        """Where the table `<layer>.<table>` keeps its data and log."""
        layer, table = name.split(".", 1)
        return f"{self.root}/{layer}/{table}{self.versions.get(name, '')}"

    def checkpoint_uri(self, name: str) -> str:
        """The checkpoint of the stream `<layer>.<name>`."""
        layer, stream = name.split(".", 1)
        return f"{self.root}/_checkpoints/{layer}/{stream}{self.versions.get(name, '')}"

    def versioned(self, name: str) -> str:
        """The name of the table (or stream) of this version: one lease per version."""
        return f"{name}{self.versions.get(name, '')}"

    @property
    def local_state_dir(self) -> Path:
        return PROJECT_ROOT / self.local_state  # an absolute local_state wins over the root


KAFKA_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
KafkaProtocol = Rule(lambda v: v in KAFKA_PROTOCOLS, f"must be one of {', '.join(KAFKA_PROTOCOLS)}")
KAFKA_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
KafkaMechanism = Rule(
    lambda v: v in KAFKA_MECHANISMS, f"must be one of {', '.join(KAFKA_MECHANISMS)}"
)


@dataclass(frozen=True)
class KafkaSecurity:
    """How every Kafka client of the project connects: Spark's (Java) and the producer's and
    status's (librdkafka), each given these in its own terms
    (`lakehouse.services.kafka.java_options`, `client_options`)."""

    protocol: Annotated[str, KafkaProtocol]
    mechanism: Annotated[str, KafkaMechanism]
    """The SASL mechanism, with a SASL_* protocol."""
    username: str
    password: str
    """From the environment (`${KAFKA_PASSWORD}`), never written in a file of the repo."""
    ca_file: str
    """PEM of the certificates that signed the brokers', with SSL; empty: the system's."""

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol.endswith("SSL")


@dataclass(frozen=True)
class KafkaSettings:
    bootstrap_servers: str
    """`host:port,…`, or `embedded` for the broker started by `lakehouse kafka start`."""
    topic_prefix: str
    partitions: Annotated[int, Positive]
    """Partitions of each topic the producer creates."""
    security: KafkaSecurity
    options: dict[str, str]
    """More Kafka client properties that Java's and librdkafka's clients both know
    (`client.id`, timeouts), given to Spark as `kafka.<key>`."""

    @property
    def topic_pattern(self) -> str:
        # Spark matches subscribePattern anywhere in a topic name; anchoring keeps
        # `other.sensors.x` out of a `sensors.` subscription.
        return f"^{re.escape(self.topic_prefix)}[A-Za-z0-9._-]+$"

    def topic(self, sensor_id: str) -> str:
        return f"{self.topic_prefix}{sensor_id}"


@dataclass(frozen=True)
class BronzeSettings:
    max_offsets_per_trigger: Annotated[int, Positive]
    trigger_interval: Annotated[str, Interval]


@dataclass(frozen=True)
class IntegrityRule:
    """How sessions of the topics matching `topics` (a regex) are judged."""

    topics: Annotated[str, Regex]
    mode: Literal["strict", "ordered", "window", "once", "none"]
    policy: Literal["fail", "quarantine"]
    window: Annotated[int, Positive]
    """`window` mode: how many records may wait for a missing seq."""


@dataclass(frozen=True)
class SilverBounds:
    """What one sensor can make the silver stream hold; past a bound, records are
    violations naming it (docs/operations.md)."""

    sessions_per_sensor: Annotated[int, Positive]
    sessions_without_snapshot: Annotated[int, Positive]
    rows_per_session: Annotated[int, Positive]


@dataclass(frozen=True)
class SilverSettings:
    integrity: list[IntegrityRule]
    """First rule whose `topics` matches a session's topic wins."""
    session_timeout_seconds: Annotated[int, Positive]
    allowed_lateness_seconds: Annotated[int, NotNegative]
    """How far a record's Kafka timestamp may trail the latest one silver has read (across
    all topics) and still find its session as it left it."""
    bounds: SilverBounds
    max_files_per_trigger: Annotated[int, Positive]
    trigger_interval: Annotated[str, Interval]

    def rule_for(self, topic: str) -> IntegrityRule:
        for rule in self.integrity:
            if re.fullmatch(rule.topics, topic):
                return rule
        return IntegrityRule(".*", "strict", "quarantine", 100)


@dataclass(frozen=True)
class S3Settings:
    endpoint: str
    """`http(s)://host:port`, `embedded` for `lakehouse s3 start`, or empty for AWS itself."""
    region: str
    path_style: bool
    """Address buckets in the path (`host/bucket/key`): object stores without wildcard DNS."""
    access_key: str
    secret_key: str
    """Empty keys leave credentials to the AWS default chain (environment, instance role)."""


@dataclass(frozen=True)
class QualitySettings:
    suites: str
    """Folder of the suites, `<layer>/<table>.json`, relative to the project."""
    validate_streams: bool
    """Validate every bronze and silver micro-batch before it is committed."""
    local_dir: str
    """Local folder of the Great Expectations project and its Data Docs site."""

    @property
    def suites_dir(self) -> Path:
        return PROJECT_ROOT / self.suites

    @property
    def gx_dir(self) -> Path:
        return PROJECT_ROOT / self.local_dir

    @property
    def site_dir(self) -> Path:
        """The report site: Great Expectations' Data Docs and the project's own pages."""
        return self.gx_dir / "gx" / "uncommitted" / "data_docs" / "local_site"


@dataclass(frozen=True)
class CatalogSettings:
    metastore: str
    """Where table names live: `embedded` (the Derby-backed metastore of `lakehouse catalog
    start`), `thrift://host:9083` (a Hive metastore service), `jdbc:…` (a metastore
    database; driver and credentials as spark.hadoop.javax.jdo.option.* in spark.conf), or
    `none` (names live only as long as one application)."""


@dataclass(frozen=True)
class ClusterSettings:
    """The embedded Spark standalone cluster of `lakehouse cluster start`, which jobs use
    when `spark.master` is `embedded`."""

    workers: Annotated[int, Positive]
    cores_per_worker: Annotated[int, Positive]
    memory_per_worker: str


@dataclass(frozen=True)
class GoldSettings:
    full_refresh_below_mb: Annotated[float, NotNegative]
    """A model whose inputs are smaller than this is rebuilt in full rather than
    incrementally: below it an incremental run's fixed costs exceed a full rebuild."""
    every_seconds: Annotated[float, Positive]
    """`run all --continuous`: gold's models run this often, beside the streams."""


@dataclass(frozen=True)
class SupervisionSettings:
    """`run all --continuous`: how a part that failed on a transient cause is restarted."""

    restarts: Annotated[int, NotNegative]
    """At most this many restarts of one part within `window_seconds`; one more fails it."""
    window_seconds: Annotated[float, Positive]
    backoff_seconds: Annotated[float, NotNegative]
    """The wait before the first restart in the window, doubled before each next one..."""
    max_backoff_seconds: Annotated[float, NotNegative]
    """... up to this."""


@dataclass(frozen=True)
class CompactSettings:
    vacuum_retention_hours: Annotated[float, NotNegative]
    """VACUUM deletes unreferenced files older than this; it must exceed the lag of the
    slowest reader of a table (checked before each VACUUM)."""
    min_retention_hours: Annotated[float, NotNegative]
    """Floor under any retention: files of a write still in flight must survive it."""
    stream_every_batches: Annotated[int, NotNegative]
    """A stream compacts the tables it writes after every this many batches (0: never)."""


@dataclass(frozen=True)
class MetricsSettings:
    enabled: bool
    """Serve Prometheus metrics from every long-running command (run, build)."""
    port: Annotated[int, Port]
    """The port on 127.0.0.1 they are served at."""


LINEAGE_TRANSPORTS = ("file", "http", "off")
LineageTransport = Rule(
    lambda v: v in LINEAGE_TRANSPORTS, f"must be one of {', '.join(LINEAGE_TRANSPORTS)}"
)
NotEmpty = Rule(bool, "must not be empty")


@dataclass(frozen=True)
class LineageSettings:
    """Where OpenLineage run events of every walk go (docs/operations.md, Lineage events)."""

    transport: Annotated[str, LineageTransport]
    """`file`: JSON lines in `<local_state>/lineage/events.jsonl`; `http`: POST to `url`."""
    url: str
    """The collector (`http://marquez:5000`): its `/api/v1/lineage` receives the events."""
    namespace: Annotated[str, NotEmpty]
    """The jobs' namespace: a node's job is `<namespace>` / `<node name>`."""


@dataclass(frozen=True)
class SqlSettings:
    """`lakehouse sql` and the SQL server: where the server listens, whom it admits, and
    what one statement may take."""

    host: str
    """The server's address: beyond loopback only with a `user` and its password."""
    port: Annotated[int, Port]
    user: str
    """Empty: the server admits anyone who reaches it (so it listens on loopback only).
    A name: it admits only that user, with the password in $LAKEHOUSE_SQL_PASSWORD."""
    max_result_bytes: Annotated[int, Positive]
    """What one statement's result may take in the driver (spark.driver.maxResultSize)."""
    query_timeout_seconds: Annotated[int, Positive]
    """How long the server lets a statement run before cancelling it."""

    @property
    def loopback(self) -> bool:
        return self.host in ("127.0.0.1", "localhost", "::1")


SQL_PASSWORD_ENV = "LAKEHOUSE_SQL_PASSWORD"
"""The SQL server's password: read by the server's JVM from its environment, never
passed on a command line or kept in a file of the repository."""


def secret_set(name: str) -> bool:
    """Whether the environment holds a (non-empty) secret under `name`; its value stays
    where it is."""
    return bool(os.environ.get(name))


@dataclass(frozen=True)
class FreshnessRule:
    """How old a table's newest data may be before `lakehouse status` warns or errs."""

    table: str
    column: str
    """The time its newest data carries: a Kafka timestamp or an event time."""
    warn_after_seconds: Annotated[float, NotNegative]
    """0: any age warns (an alert that the data is not live)."""
    error_after_seconds: Annotated[float, NotNegative]


@dataclass(frozen=True)
class KafkaLagRule:
    """How far bronze may be behind the broker, per topic, before `lakehouse status` warns
    or errs: in records not read, and in how long the oldest of them has waited."""

    warn_records: Annotated[int, NotNegative]
    error_records: Annotated[int, NotNegative]
    warn_seconds: Annotated[float, NotNegative]
    error_seconds: Annotated[float, NotNegative]


@dataclass(frozen=True)
class StallRule:
    """How long a stream may go without a batch while its input waits (Kafka records bronze
    has not read, versions silver has not read) before `lakehouse status` warns or errs."""

    warn_after_seconds: Annotated[float, NotNegative]
    error_after_seconds: Annotated[float, NotNegative]


@dataclass(frozen=True)
class StatusSettings:
    kafka_lag: KafkaLagRule
    stalled: StallRule
    freshness: list[FreshnessRule]


@dataclass(frozen=True)
class Settings:
    target: str
    spark: SparkSettings
    storage: StorageSettings
    kafka: KafkaSettings
    s3: S3Settings
    catalog: CatalogSettings
    cluster: ClusterSettings
    bronze: BronzeSettings
    silver: SilverSettings
    gold: GoldSettings
    compact: CompactSettings
    quality: QualitySettings
    metrics: MetricsSettings
    lineage: LineageSettings
    sql: SqlSettings
    status: StatusSettings
    supervision: SupervisionSettings


def conf_dir(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    return Path(environ.get(CONF_DIR_ENV, PROJECT_ROOT / "conf"))


def load_settings(target: str | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read base + target + environment into frozen, typed settings."""
    environ = os.environ if environ is None else environ
    target = target or environ.get(TARGET_ENV, "local")
    folder = conf_dir(environ)
    target_file = folder / f"{target}.yaml"
    if target == "base" or not target_file.exists():
        known = sorted(p.stem for p in folder.glob("*.yaml") if p.stem != "base")
        raise SettingsError(f"unknown target {target!r}: no {target_file} (targets: {known})")
    files = (folder / "base.yaml", target_file)
    settings: Settings = loader.load(
        Settings, files, environ, ENV_PREFIX, {"target": (target, "--target")}
    )
    return settings
