"""The lock files that stand for leases on a local lake: writers share them, a command that
rewrites a stream's checkpoint needs them alone. Real locks on real files; S3's leases are
tested against a real S3 server in tests/integration/test_lease.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from bronze import sensor_records
from lakehouse.storage.lease import LeaseRefused, holding
from tests.support import settings_for


def test_writers_share_a_local_table_and_a_command_needing_it_alone_waits_for_them(
    tmp_path: Path,
) -> None:
    settings = settings_for(tmp_path, "127.0.0.1:9", "x.")
    table = ["silver.sessions"]

    with (
        holding(settings, table, "the silver stream"),
        holding(settings, table, "compact"),
        pytest.raises(LeaseRefused) as refused,
        holding(settings, table, "x", exclusive=True),
    ):
        pass
    assert str(refused.value) == (
        "silver.sessions is in use: x needs it alone, and a writer of it runs (the bronze or "
        "silver stream, `run all`, compaction); stop it first"
    )
    with (
        holding(settings, table, "x", exclusive=True),
        pytest.raises(LeaseRefused, match="held by a command that needs it alone"),
        holding(settings, table, "the silver stream"),
    ):
        pass
    with holding(settings, table, "the silver stream"):
        pass  # free again once the command ended


def test_accepting_a_kafka_change_on_a_local_lake_is_refused_while_bronze_runs(
    tmp_path: Path,
) -> None:
    """Refused before it reads bronze's checkpoint, let alone rewrites it (no Spark here)."""
    settings = settings_for(tmp_path, "127.0.0.1:9", "x.")

    with (
        holding(settings, sensor_records.WRITES, "the bronze stream"),
        pytest.raises(LeaseRefused, match=r"^bronze\.sensor_records is in use: accept "),
    ):
        sensor_records.accept_kafka_change(None, settings, "offsets_lost", "x.sensor-001", 0)  # type: ignore[arg-type]
