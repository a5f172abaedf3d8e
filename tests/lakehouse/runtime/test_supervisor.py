"""Supervision of `run all`'s parts: which failures are restarted, how often and after how
long, and that a lasting failure of one part stops the others. Parts here are plain
Python callables: what is judged is the supervisor's logic, not Spark's."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from lakehouse.core.errors import LakehouseError, Unavailable, transient
from lakehouse.core.settings import SupervisionSettings
from lakehouse.runtime import supervise as supervise_module
from lakehouse.runtime.supervise import Budget, Part, supervise

POLICY = SupervisionSettings(
    restarts=3, window_seconds=60, backoff_seconds=0.01, max_backoff_seconds=0.02
)


def test_waits_double_up_to_the_cap_and_the_budget_is_spent_within_the_window() -> None:
    budget = Budget(SupervisionSettings(4, 60, backoff_seconds=2, max_backoff_seconds=10))

    assert [budget.next_wait(t) for t in (0, 1, 2, 3, 4)] == [2, 4, 8, 10, None]
    assert budget.next_wait(61) == 10  # the first restart left the window: one more in it
    assert budget.next_wait(61) is None


def test_transient_failures_are_services_that_did_not_answer_not_the_projects_refusals() -> None:
    broker_down = (
        "org.apache.spark.sql.streaming.StreamingQueryException: Query failed\n"
        "Caused by: org.apache.kafka.common.errors.TimeoutException: Timed out waiting"
    )
    data_loss = (
        "org.apache.spark.sql.streaming.StreamingQueryException: [KAFKA_DATA_LOSS.X] lost\n"
        "Caused by: java.net.ConnectException: Connection refused"
    )
    in_a_batch = "lakehouse.core.errors.Unavailable: object storage did not answer"
    expectation = "lakehouse.quality.gates.ExpectationFailed: at_most_ten (fail) failed"

    s3_down = 'botocore.exceptions.EndpointConnectionError: Could not connect to "http://s3"'
    assert transient(broker_down) and transient(in_a_batch) and transient(s3_down)
    assert transient(Unavailable("Kafka is unreachable: 127.0.0.1:9"))
    assert not transient(data_loss)
    assert not transient(expectation)
    assert not transient(LakehouseError("bronze holds records but its checkpoint is new"))
    assert not transient(ValueError("a bug"))


def test_a_transient_failure_restarts_its_part_and_says_so() -> None:
    stop, runs, events = threading.Event(), [], []

    def flaky(stop: threading.Event) -> None:
        runs.append(time.monotonic())
        if len(runs) < 3:
            raise Unavailable("Kafka is unreachable: 127.0.0.1:9 (Connection refused)")
        stop.set()  # as SIGTERM would

    failure = supervise([Part("bronze", flaky)], POLICY, stop, lambda *event: events.append(event))

    assert failure is None and len(runs) == 3
    assert [status for _, status, _ in events] == ["restarted", "restarted"]
    assert events[0][2] == "Kafka is unreachable: 127.0.0.1:9 (Connection refused)"


def test_a_lasting_failure_of_one_part_stops_the_others() -> None:
    stop, events, others_stopped = threading.Event(), [], threading.Event()

    def failing(_stop: threading.Event) -> None:
        time.sleep(0.05)
        raise LakehouseError("silver.sessions batch 3: expectation no_sensor_9 (fail) failed")

    def steady(stop: threading.Event) -> None:
        stop.wait(30)
        others_stopped.set()

    failure = supervise(
        [Part("bronze", steady), Part("silver", failing), Part("gold", steady)],
        POLICY,
        stop,
        lambda *event: events.append(event),
    )

    assert failure is not None and failure.part == "silver"
    assert failure.line == "silver.sessions batch 3: expectation no_sensor_9 (fail) failed"
    assert others_stopped.is_set() and events == [("silver", "error", failure.line)]


def test_a_part_failing_past_its_budget_gives_up_naming_the_restarts() -> None:
    def always(_stop: threading.Event) -> None:
        raise Unavailable("object storage did not answer")

    failure = supervise([Part("silver", always)], POLICY, threading.Event(), lambda *_: None)

    assert failure is not None
    assert failure.line == "gave up after 3 restarts within 60s: object storage did not answer"


def test_a_part_that_ends_by_itself_is_restarted_then_stops_every_part_with_a_line() -> None:
    """A stream whose query was stopped from outside returns without an error: restarted
    within the budget, and past it every part stops, not just that one."""
    runs, events, others_stopped = [], [], threading.Event()

    def ends(_stop: threading.Event) -> None:
        runs.append(1)

    def steady(stop: threading.Event) -> None:
        stop.wait(30)
        others_stopped.set()

    failure = supervise(
        [Part("silver", ends), Part("bronze", steady)],
        POLICY,
        threading.Event(),
        lambda *event: events.append(event),
    )

    assert len(runs) == 4 and [e[1] for e in events] == ["restarted"] * 3 + ["error"]
    assert failure is not None and failure.part == "silver" and others_stopped.is_set()
    assert failure.line == (
        "gave up after 3 restarts within 60s: ended while the pipeline runs (its query "
        "stopped from outside?)"
    )


def test_a_part_whose_version_was_swapped_out_ends_after_its_batch_and_the_others_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(supervise_module, "LOOK_EVERY_S", 0.01)
    stop, swapped, batches = threading.Event(), threading.Event(), {"bronze": 0, "silver": 0}

    def stream(name: str) -> Callable[[threading.Event], None]:
        def run(end: threading.Event) -> None:
            while not end.wait(0.01):
                batches[name] += 1
                if name == "silver" and batches[name] == 5:
                    swapped.set()  # the swap, as another command does it
                if batches["bronze"] > 200:
                    stop.set()  # as SIGTERM would

        return run

    parts = [Part("bronze", stream("bronze")), Part("silver", stream("silver"))]
    failure = supervise(
        parts, POLICY, stop, lambda *_: None, lambda p: not (p == "silver" and swapped.is_set())
    )

    assert failure is None
    assert 5 <= batches["silver"] < 50 and batches["bronze"] > 200  # bronze went on alone
