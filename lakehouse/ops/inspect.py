"""`lakehouse inspect`: the sessions held in the silver stream's state, one line each."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.core.errors import LakehouseError, explain
from lakehouse.core.settings import Settings
from silver import reconstruct


def live_sessions(
    spark: SparkSession, settings: Settings, named: Sequence[str], at_most: int
) -> list[str]:
    """A count of the live sessions and a line for each of the first `at_most` (only the
    `named` ones, each `session_id` or `sensor/session_id`, where any are named)."""
    try:
        state = reconstruct.live_state(spark, settings)
        if named:
            whole = F.concat_ws("/", "sensor_id", "session_id")
            state = state.where(F.col("session_id").isin(*named) | whole.isin(*named))
        rows = state.orderBy("sensor_id", "session_id").limit(at_most).collect()
        total = state.count()
    except Exception as error:  # Spark's reader says "no state" in a long Java trace
        raise LakehouseError(f"cannot read silver state: {explain(error)}") from None
    head = f"{total:,} live sessions in silver state" + (f" (first {len(rows)})" if rows else "")
    return [head] + [
        f"  {r.sensor_id}/{r.session_id:<36} {r.status:<8} last_seq={r.last_seq} "
        f"rows={r.table_rows} records={r.records} until={r.deadline:%Y-%m-%d %H:%M:%S} "
        f"state={r.state_bytes:,}B"
        for r in rows
    ]
