"""One game day: traffic with known answers, each fault of the scenario at its moment, the
pipeline's recovery, and a verdict per step from reconciling every layer.

A step sends its own traffic (the generator's, its seed the step's number), strikes, waits
until the pipeline has caught up by itself (or after the operator's documented command,
which the step runs and names), then reconciles Kafka ↔ bronze (each record once, byte for
byte, but those Kafka's broker no longer has), bronze ↔ silver (the reference session
machine over what was sent, by key and value) and silver ↔ gold (gold computed with
pandas from that reference)."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from urllib.parse import urlparse

from pyspark.sql import SparkSession

from lakehouse.core.console import echo
from lakehouse.core.errors import LakehouseError, first_line
from lakehouse.definitions import READERS
from lakehouse.gameday import faults, lake, reconcile, reference
from lakehouse.gameday.pipeline import Namespace, Pipeline, ended, lakehouse
from lakehouse.gameday.reconcile import KafkaRecord, Loss, Tally
from lakehouse.gameday.scenario import Scenario, Step
from lakehouse.ops import status
from lakehouse.ops.producer import TrafficSpec, produce
from lakehouse.services import s3
from lakehouse.services.kafka import watermarks
from lakehouse.storage import positions

POLL_S = 2.0
"""How often a step asks whether the pipeline caught up: a few listings, and its readers
asked (Spark jobs) only when something was written since they were found behind."""
READERS_IN_ORDER = (
    tuple(r for r in READERS if r.checkpoint is not None),
    tuple(r for r in READERS if r.checkpoint is None),
)
"""The streams' readers, then the models'."""
RECOVERY_S = 300.0
"""How long a step waits for the pipeline to catch up before its verdict is FAIL."""


@dataclass
class Verdict:
    """What one step found."""

    step: str
    outcome: str
    """PASS, FAIL or SKIP."""
    tallies: list[Tally] = field(default_factory=list)
    recovered_s: float | None = None
    note: str = ""
    started_at: str = ""
    seconds: float = 0.0

    def line(self) -> str:
        """`PASS kill silver at after-commit: 0 lost, 0 doubled, recovered in 14.2 s`."""
        if self.outcome == "SKIP":
            return f"SKIP {self.step}: {self.note}"
        lost, doubled = (sum(t.lost for t in self.tallies), sum(t.doubled for t in self.tallies))
        text = f"{self.outcome} {self.step}: {lost} lost, {doubled} doubled"
        altered = sum(t.altered for t in self.tallies)
        text += f", {altered} altered" if altered else ""
        if self.recovered_s is not None:
            text += f", recovered in {self.recovered_s:.1f} s"
        wrong = [t.line() for t in self.tallies if not t.ok]
        return text + "".join(f"\n  {w}" for w in wrong) + (f"\n  {self.note}" if self.note else "")


class Skipped(Exception):
    """The target cannot take this fault: the step is SKIP, with why."""


class Day:
    """The state a game day carries from step to step."""

    def __init__(self, space: Namespace, spark: SparkSession, scenario: Scenario) -> None:
        self.space, self.spark, self.scenario = space, spark, scenario
        self.pipeline = Pipeline(space)
        self.sent: dict[tuple[str, int, int], KafkaRecord] = {}
        """Every record sent, as Kafka held it before any was lost."""
        self.lost_in_kafka: list[Loss] = []
        """The offsets Kafka itself no longer has, as its broker said at each loss: the only
        records forgiven as lost (never the pipeline's own record of what it skipped)."""
        self.step_number = 0
        self._behind_at: tuple[int, ...] | None = None
        """What was written when the readers were last found behind."""

    def traffic(self, **changes: object) -> TrafficSpec:
        """The step's traffic: the scenario's, its sensors and seed the step's own."""
        spec = TrafficSpec(
            seed=self.step_number,
            first_sensor=1 + 10 * self.step_number,
            topic_prefix=self.space.prefix,
            partitions=2,
            **asdict(self.scenario.traffic),
        )
        return replace(spec, **changes)  # type: ignore[arg-type]

    def send(self, *specs: TrafficSpec) -> None:
        """`specs` (by default the step's traffic) to Kafka one after the other, then what
        Kafka holds kept: read back once, after all of them, so that the pipeline's next
        batch usually takes them together."""
        for spec in specs or (self.traffic(),):
            produce(spec, self.space.bootstrap)
        self.remember()

    def more(self) -> None:
        """Traffic of new sensors beside the step's: for another batch, or topics a running
        bronze has not seen yet."""
        self.step_number += 100
        self.send()

    def restart(self) -> None:
        """The pipeline started again after it died. On S3 a dead writer's table leases
        are refused to the next until they expire (`storage.lease_seconds`): as its
        operator would, game day waits them out first."""
        if self.space.on_s3:
            settings = self.space.settings
            faults.wait_leases_expired(s3.client(settings), settings.storage.root)
        self.pipeline.start()

    def remember(self) -> None:
        for record in lake.kafka_records(self.space.bootstrap, self.space.prefix):
            self.sent.setdefault(record[:3], record)

    def caught_up(self) -> bool:
        """Bronze has read every Kafka record; silver and gold every version of their
        inputs. Kafka first: while bronze lags, the rest need not be read."""
        settings = self.space.settings
        read = positions.kafka_offsets(
            self.spark, settings.storage.checkpoint_uri("bronze.sensor_records")
        )
        if not read or any(p.lag for p in status.kafka_lag(watermarks(settings), read)):
            return False
        # Asking each reader is Spark jobs beside the pipeline's, on the same cores: asked
        # again only once something a reader's position depends on was written, and in the
        # pipeline's order: gold's models are not asked while silver is behind bronze.
        mark = lake.written_mark(self.spark, settings)
        if mark == self._behind_at:
            return False
        for readers in READERS_IN_ORDER:
            lags = status.readers_behind(self.spark, settings, readers)
            done = {(r.reader, r.table) for r in lags if not r.rows_behind}
            if len(done) < len({(r.name, r.table) for r in readers}):
                self._behind_at = mark
                return False
        return True

    def recover(self) -> float:
        """Seconds until the pipeline caught up; LakehouseError if it did not in time."""
        began = time.monotonic()
        while not self.caught_up():
            if not self.pipeline.alive():
                raise LakehouseError(f"the pipeline ended (its log: {self.pipeline.log})")
            if time.monotonic() - began > RECOVERY_S:
                raise LakehouseError(f"not caught up after {RECOVERY_S:.0f} s")
            time.sleep(POLL_S)
        return time.monotonic() - began

    def reconcile(self) -> list[Tally]:
        """Every layer against what it must hold now."""
        settings, lost = self.space.settings, self.lost_in_kafka
        bronze = reconcile.kafka_vs_bronze(
            self.sent.values(), lake.bronze_records(self.spark, settings), lost
        )
        kept = [r for r in self.sent.values() if not reconcile.forgiven(r, lost)]
        kept = [r for r in kept if reference.reaches_silver(r[3], r[4])]
        expected = reference.reconstruct(
            [(t, p, o, v) for t, p, o, _, v, _ in kept], self.space.prefix
        )
        silver = reconcile.silver_vs_reference(lake.silver_found(self.spark, settings), expected)
        return [bronze, silver, lake.gold_tally(self.spark, settings, expected)]


def run_step(day: Day, step: Step, number: int) -> Verdict:
    """One step: its fault, the recovery, the verdict; never raises for the step's sake."""
    day.step_number = number
    began, at = time.monotonic(), datetime.now(UTC).isoformat(timespec="seconds")
    verdict = Verdict(step.name, "PASS", started_at=at)
    try:
        restarted = FAULTS[step.kind](day, step)
        verdict.recovered_s = day.recover() + (restarted or 0.0)
        verdict.tallies = day.reconcile()
        verdict.outcome = "PASS" if all(t.ok for t in verdict.tallies) else "FAIL"
    except Skipped as why:
        verdict.outcome, verdict.note = "SKIP", str(why)
    except Exception as error:  # the step failed; the day goes on to say so
        verdict.outcome, verdict.note = "FAIL", first_line(str(error))
        # What the lake holds once the pipeline caught up (if it can), to name what is
        # wrong rather than what it had not yet read.
        with suppress(Exception):
            day.recover()
        with suppress(Exception):
            verdict.tallies = day.reconcile()
        if not day.pipeline.alive():
            day.restart()
    verdict.seconds = time.monotonic() - began
    return verdict


def baseline(day: Day, step: Step) -> None:
    day.send()


def kill(day: Day, step: Step) -> float:
    """SIGKILL the pipeline at the moment of the stream's batch, then start it again."""
    stream = "bronze.sensor_records" if step.stream == "bronze" else "silver.sessions_stream"
    checkpoint = day.space.settings.storage.checkpoint_uri(stream)
    if day.space.gate is not None:  # on S3: the gate holds the very request
        day.space.gate.arm(store_moment(step.moment, checkpoint), day.pipeline.kill)
        day.send()
        faults.wait_struck(day.space.gate, RECOVERY_S, day.pipeline.alive)
        echo(f"  killed holding {day.space.gate.struck_at}")
    elif day.space.on_s3:
        raise Skipped("the object store is reached over TLS: game day cannot see its requests")
    else:
        table = day.space.settings.storage.table_uri(
            "bronze.sensor_records" if step.stream == "bronze" else "silver.row_changes"
        )
        local = faults.LocalMoment(step.moment, day.space.local(checkpoint), day.space.local(table))
        day.send()
        faults.strike_at(local, day.pipeline.kill, RECOVERY_S, day.pipeline.alive, more=day.more)
    began = time.monotonic()
    day.restart()
    return time.monotonic() - began


def store_moment(moment: str, checkpoint: str) -> faults.Moment:
    """`moment` of a stream's next batch as the request that begins it (path-style S3): its
    offsets' write, its checkpoint commit's write (after every Delta commit of the batch),
    or the first request after that commit."""
    address = urlparse(checkpoint)
    folder = re.escape(f"/{address.netloc}{address.path}")
    match moment:
        case "before-writes":
            return faults.Moment(moment, rf"^PUT {folder}/offsets/")
        case "after-delta-commit":
            return faults.Moment(moment, rf"^PUT {folder}/commits/")
        case _:  # after-commit
            return faults.Moment(moment, r"^", after=rf"^PUT {folder}/commits/\d+$")


def broker_stop(day: Day, step: Step) -> None:
    """The broker stopped for `seconds` under the running pipeline, then started again."""
    broker = day.space.broker
    if broker is None:
        raise Skipped("the target's broker is not one game day started")
    if not day.sent:  # a broker away at the pipeline's start is a failure, not this fault
        day.send()
        day.recover()
    day.send()  # the broker goes while the running pipeline reads this
    broker.stop()
    time.sleep(step.seconds)
    broker.start()
    day.more()  # new topics, which the running bronze has not seen


def long_stop(day: Day, step: Step) -> None:
    """The pipeline stopped for `seconds` while traffic goes on: a backlog on restart."""
    day.pipeline.stop()
    day.send()
    time.sleep(step.seconds)
    day.pipeline.start()


def clock_ahead(day: Day, step: Step) -> None:
    """One sensor's clock `hours` ahead of the others', beside the usual traffic."""
    usual = day.traffic()
    ahead = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=step.hours)
    day.step_number += 100
    # Sent together, so that one batch of each stream usually takes both (two sends, each
    # read back, took two batches of each stream and two gold cycles).
    day.send(usual, day.traffic(sensors=1, start_time=ahead, faults={}))  # its clock the only fault


def retention_loss(day: Day, step: Step) -> None:
    """Records of one partition deleted before bronze read them (as retention would):
    bronze stops naming the loss; game day accepts it with the operator's command
    (`lakehouse bronze accept-loss`) and the loss is accounted for. Bronze is seen to stop
    by `lakehouse run bronze` (bronze's own job, as `run all` runs it): the pipeline's
    silver and gold would start beside it for nothing, on the cores bronze needs."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    if not day.sent:
        day.send()  # a partition bronze reads, to lose records of
        day.recover()
    topic = min(t for t, _, _ in day.sent)
    day.pipeline.stop()
    before = set(day.sent)
    day.send(
        day.traffic(first_sensor=int(topic.removeprefix(day.space.prefix).removeprefix("sensor-")))
    )
    fresh = sorted(k for k in day.sent if k not in before and k[0] == topic)
    partition, low = fresh[0][1], fresh[0][2]
    admin = AdminClient({"bootstrap.servers": day.space.bootstrap})
    deleted = admin.delete_records([TopicPartition(topic, partition, low + step.records)])
    for future in deleted.values():
        # Kafka's loss: from the first record sent while the pipeline was stopped (bronze
        # read every one before it) to the log-start offset its broker answers now.
        day.lost_in_kafka.append((topic, partition, low, future.result(30).low_watermark))
    with day.pipeline.log.open("ab") as out:
        bronze = lakehouse(day.space, "run", "bronze", stdout=out)
        code = ended(bronze, RECOVERY_S)
    if code is None or code == 0:
        raise LakehouseError(f"bronze did not stop at the loss of {topic}/{partition}")
    accept = lakehouse(day.space, "bronze", "accept-loss", topic, str(partition),
                       "--reason", "game day: retention-loss")  # fmt: skip
    if ended(accept, RECOVERY_S) != 0:
        raise LakehouseError(f"`lakehouse bronze accept-loss {topic} {partition}` failed")
    echo(f"  ran `lakehouse bronze accept-loss {topic} {partition}` (the documented way on)")
    day.pipeline.start()


def store_outage(day: Day, step: Step) -> None:
    """The object store unreachable from the pipeline for `seconds`, mid-traffic."""
    if day.space.gate is None:
        raise Skipped("needs a lake on an object store reached over plain HTTP")
    day.send()
    day.space.gate.outage(step.seconds)
    time.sleep(step.seconds)


def worker_kill(day: Day, step: Step) -> None:
    """SIGKILL of the worker that runs the pipeline's executor, mid-traffic; the worker
    comes back by the operator's command (`lakehouse cluster start`)."""
    cluster = day.space.cluster
    if cluster is None:
        raise Skipped("needs the embedded cluster (a worker game day can kill and start)")
    day.send()
    worker = cluster.busy_worker()
    if worker is None:
        raise LakehouseError("no worker runs the pipeline's executor")
    os.killpg(worker, signal.SIGKILL)  # the worker and its executors, as a lost machine
    cluster.start()
    echo("  ran `lakehouse cluster start` (the documented way to bring a worker back)")


FAULTS: dict[str, Callable[[Day, Step], float | None]] = {
    "baseline": baseline,
    "kill": kill,
    "broker-stop": broker_stop,
    "store-outage": store_outage,
    "worker-kill": worker_kill,
    "retention-loss": retention_loss,
    "clock-ahead": clock_ahead,
    "long-stop": long_stop,
}
"""Each fault's means; it returns seconds already spent restarting, if any."""
