"""The state silver keeps (a session's live row ids, and a count) kept by both Python state
APIs: one JSON value per session (`applyInPandasWithState`), or a value state and a map
state (`transformWithStateInPandas`). `benchmarks.silver` times each to a `noop` sink."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.state import GroupStateTimeout

COUNTED = "session_id STRING, rows BIGINT"


def with_state(
    key: tuple[Any, ...], chunks: Iterator[pd.DataFrame], state: Any
) -> Iterator[pd.DataFrame]:
    """A session's row ids as one JSON value."""
    ids = set(json.loads(state.get[0])) if state.exists else set()
    for chunk in chunks:
        ids.update(chunk["row_id"].dropna())
    state.update((json.dumps(list(ids)),))
    yield pd.DataFrame({"session_id": [key[0]], "rows": [len(ids)]})


class RowIds(StatefulProcessor):
    """A session's row ids in a map state, their count in a value state."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.getValueState("count", "rows BIGINT")
        self.ids = handle.getMapState("ids", "row_id STRING", "live BOOLEAN")

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
    ) -> Iterator[pd.DataFrame]:
        count = self.count.get()[0] if self.count.exists() else 0
        for chunk in rows:
            for row_id in chunk["row_id"].dropna().unique():
                if not self.ids.containsKey((row_id,)):
                    self.ids.updateValue((row_id,), (True,))
                    count += 1
        self.count.update((count,))
        yield pd.DataFrame({"session_id": [key[0]], "rows": [count]})

    def close(self) -> None:
        pass


def variants(parsed: DataFrame) -> dict[str, DataFrame]:
    """Each API's count of the row ids of `parsed` (session_id, row_id), by its name."""
    grouped = parsed.groupBy("session_id")
    return {
        "applyInPandasWithState": grouped.applyInPandasWithState(
            with_state, COUNTED, "body STRING", "append", GroupStateTimeout.NoTimeout
        ),
        "transformWithStateInPandas": grouped.transformWithStateInPandas(
            RowIds(), COUNTED, "Append", "None"
        ),
    }
