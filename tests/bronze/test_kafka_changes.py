"""What accepting a change in Kafka does to where bronze stands: pure planning, no Spark."""

from __future__ import annotations

import pytest

from bronze.kafka_changes import (
    Change,
    Topics,
    describe,
    lost_offsets,
    moved,
    recreated_topic,
    retired_topic,
    topics_of,
)
from lakehouse.core.errors import LakehouseError

POSITION = {("s.a", 0): 120, ("s.a", 1): 80, ("s.b", 0): 40}


def test_a_loss_skips_from_where_bronze_stands_to_kafkas_earliest_offset() -> None:
    kafka = {("s.a", 0): (240, 300), ("s.a", 1): (80, 90), ("s.b", 0): (0, 40)}
    changes = lost_offsets(POSITION, kafka, "s.a", 0, 1)
    assert changes == [Change("offsets_lost", "s.a", 0, 120, 239, 240, 1)]
    assert moved(POSITION, changes) == {**POSITION, ("s.a", 0): 240}


def test_a_partition_bronze_never_read_loses_from_offset_zero() -> None:
    changes = lost_offsets(POSITION, {("s.c", 0): (7, 9)}, "s.c", 0, 1)
    assert changes == [Change("offsets_lost", "s.c", 0, 0, 6, 7, 1)]


@pytest.mark.parametrize(
    ("kafka", "refusal"),
    [
        ({("s.a", 1): (80, 90)}, "nothing of s.a partition 1 is lost"),
        ({("s.a", 1): (10, 90)}, "nothing of s.a partition 1 is lost"),
        ({}, "Kafka has no partition 1 of topic s.a"),
    ],
)
def test_a_loss_that_is_not_one_is_refused(
    kafka: dict[tuple[str, int], tuple[int, int]], refusal: str
) -> None:
    with pytest.raises(LakehouseError, match=refusal):
        lost_offsets(POSITION, kafka, "s.a", 1, 1)


def test_a_retired_topic_is_read_no_more_and_the_others_go_on() -> None:
    changes = retired_topic(POSITION, {}, {("s.b", 0): (0, 40)}, "s.a", 1)
    assert changes == [
        Change("topic_retired", "s.a", 0, 120, None, None, 1),
        Change("topic_retired", "s.a", 1, 80, None, None, 1),
    ]
    assert moved(POSITION, changes) == {("s.b", 0): 40}


def test_a_topic_only_planned_can_be_retired_having_read_nothing_of_it() -> None:
    planned = {**POSITION, ("s.new", 0): 5}
    changes = retired_topic(POSITION, planned, {}, "s.new", 1)
    assert changes == [Change("topic_retired", "s.new", 0, None, None, None, 1)]


@pytest.mark.parametrize(
    ("topic", "kafka", "refusal"),
    [
        ("s.a", {("s.a", 0): (0, 500)}, "topic s.a is still in Kafka"),
        ("s.z", {}, "bronze reads no topic s.z"),
    ],
)
def test_retiring_a_topic_kafka_still_has_or_bronze_never_read_is_refused(
    topic: str, kafka: dict[tuple[str, int], tuple[int, int]], refusal: str
) -> None:
    with pytest.raises(LakehouseError, match=refusal):
        retired_topic(POSITION, POSITION, kafka, topic, 1)


def test_a_topic_whose_offsets_went_back_is_read_from_its_first_as_the_next_incarnation() -> None:
    # Made again with one partition, below where bronze stood in it.
    kafka = {("s.a", 0): (0, 30), ("s.b", 0): (0, 40)}
    changes = recreated_topic(POSITION, kafka, "s.a", retired=False, incarnation=1)
    assert changes == [
        Change("topic_recreated", "s.a", 0, 120, None, 0, 2),
        Change("topic_recreated", "s.a", 1, 80, None, None, 2),
    ]
    assert moved(POSITION, changes) == {("s.a", 0): 0, ("s.b", 0): 40}


def test_a_retired_topic_back_in_kafka_is_read_as_the_next_incarnation() -> None:
    after = {("s.b", 0): 40}
    changes = recreated_topic(after, {("s.a", 0): (3, 900)}, "s.a", retired=True, incarnation=2)
    assert changes == [Change("topic_recreated", "s.a", 0, None, None, 3, 3)]


@pytest.mark.parametrize(
    ("kafka", "refusal"),
    [
        ({("s.a", 0): (0, 130), ("s.a", 1): (0, 80)}, "s.a does not look re-created"),
        ({}, "topic s.a is not in Kafka"),
    ],
)
def test_a_topic_not_known_to_be_made_again_is_not_read_again(
    kafka: dict[tuple[str, int], tuple[int, int]], refusal: str
) -> None:
    # Read again from offset 0, a topic that was not re-created would double its records.
    with pytest.raises(LakehouseError, match=refusal):
        recreated_topic(POSITION, kafka, "s.a", retired=False, incarnation=1)


def test_a_change_reads_as_what_was_skipped_and_where_bronze_goes_on() -> None:
    lost = Change("offsets_lost", "s.a", 0, 120, 239, 240, 1)
    assert describe(lost.__dict__) == (
        "offsets_lost     s.a/0: skipped offsets 120..239, reads from 240"
    )
    gone = Change("topic_recreated", "s.a", 1, 80, None, None, 2)
    assert describe(gone.__dict__) == (
        "topic_recreated  s.a/1: skipped from offset 80 on, read no more (incarnation 2)"
    )


def test_only_the_changes_made_for_bronzes_present_checkpoint_say_how_topics_are_read() -> None:
    """After `run bronze --full-refresh` batch numbers start again: a change made for the
    checkpoint it replaced (a retirement at batch 9) must not outrank one made since (the
    topic re-created, at batch 2), nor be read at all."""
    old, new = "checkpoint-before-the-rebuild", "checkpoint-now"
    recorded = [
        {"change": "topic_recreated", "topic": "s.a", "incarnation": 2, "bronze_batch": 4,
         "checkpoint_id": old},
        {"change": "topic_retired", "topic": "s.a", "incarnation": 2, "bronze_batch": 9,
         "checkpoint_id": old},
        {"change": "topic_retired", "topic": "s.b", "incarnation": 1, "bronze_batch": 7,
         "checkpoint_id": old},
        {"change": "topic_recreated", "topic": "s.a", "incarnation": 2, "bronze_batch": 2,
         "checkpoint_id": new},
    ]  # fmt: skip

    assert topics_of(recorded, new) == Topics({"s.a": 2}, {})
    assert topics_of(recorded, old) == Topics({"s.a": 2}, {"s.a": 9, "s.b": 7})
    assert topics_of(recorded, None) == Topics({}, {})  # a checkpoint not begun yet
