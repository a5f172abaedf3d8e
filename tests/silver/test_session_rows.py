from __future__ import annotations

from silver.session_rows import last_resets


def test_each_session_is_reset_at_its_last_snapshot_whatever_partition_it_was_found_in() -> None:
    found = [
        ("a", "s1", "sensors.a", 0, 7),
        ("a", "s1", "sensors.a", 1, 9),  # the same session after a topic was re-created
        ("a", "s1", "sensors.a", 0, 3),
        ("b", "s1", "sensors.b", 2, 5),  # another sensor's session of the same id
    ]
    assert last_resets(found) == [("a", "s1", "sensors.a", 1, 9), ("b", "s1", "sensors.b", 2, 5)]
    assert last_resets([]) == []
