"""What a run says it ingested, from Spark's progress of its batches: the query here is a
plain object standing for one, as what is judged is the loop that reads its progress, not
Spark."""

from __future__ import annotations

import threading
from typing import Any, ClassVar

from lakehouse.runtime.streams import await_query


def batch(batch_id: int, rows: int) -> dict[str, Any]:
    return {"batchId": batch_id, "numInputRows": rows, "processedRowsPerSecond": 1000.0}


class EndsDuringTheLoop:
    """A query to the end of its input whose last batch ends, and the query with it, just
    after the loop has read the progress of the batch before."""

    name = "bronze.sensor_records"
    status: ClassVar[dict[str, Any]] = {"message": "Stopped", "isTriggerActive": False}

    def __init__(self) -> None:
        self.reads = 0

    @property
    def recentProgress(self) -> list[dict[str, Any]]:
        self.reads += 1
        return [batch(0, 500_000)] if self.reads == 1 else [batch(0, 500_000), batch(1, 500_000)]

    @property
    def isActive(self) -> bool:
        return self.reads == 0

    def awaitTermination(self, timeout: float | None = None) -> bool:
        return True

    def stop(self) -> None:
        pass


def test_a_run_counts_the_batch_that_ended_as_the_query_did() -> None:
    query = EndsDuringTheLoop()

    stats = await_query(query, query.name, "checkpoint", stop=threading.Event())  # type: ignore[arg-type]

    assert (stats.batches, stats.input_rows) == (2, 1_000_000)
