"""A gold cycle of `run all` on a small lake: each model's gate results and run-log row kept
until the walk's end and committed once for all models (as a walk records them since
2026-12-07), against each model committing its own as it ends (as before), in one
application on one lake.

Before each measured cycle, one late session of one sensor goes through silver (not
timed), so that every model has new input and rebuilds (inputs this small are rebuilt in
full, `gold.full_refresh_below_mb`). Both ways run the same models in the same order with
the same gate (its results the same rows) and the same run log; neither takes the walk's
leases (on a local lake, lock files) nor writes its progress rows. After an untimed cycle of
each, the two alternate three times; the medians count.

    python -m benchmarks.gold_walk
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from benchmarks.common import medians, timed
from benchmarks.gold import BASE, Lake
from lakehouse.definitions import MODELS
from lakehouse.graph.models import dependency_order
from lakehouse.quality.gates import write_gate
from lakehouse.runtime.incremental import record_runs, run_log, run_models
from silver import reconstruct

SMALL = replace(BASE, updates_per_session=50, rows_per_snapshot=20)
"""Sessions of a game day's size: gold's bookkeeping weighs most where its work is small."""


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        lake = Lake(Path(folder))
        lake.append(replace(SMALL, seed=1, sessions_per_sensor=1))
        reconstruct.run(lake.spark, lake.settings)
        late = iter(range(1, 1_000))

        def cycle(at_the_end: bool) -> None:
            """Each model in turn, as a walk runs them; recorded at the end or each as it ends."""
            spark, storage = lake.spark, lake.settings.storage
            gate = write_gate(lake.settings.quality, storage, "gold")
            history, runs = run_log(spark, storage), []
            for model in dependency_order(MODELS):
                runs += run_models(
                    spark, storage, [model], gate=gate, history=history,
                    record=not at_the_end, echo=lambda _: None,
                )  # fmt: skip
            if at_the_end:
                record_runs(spark, storage, gate.run_id, runs, gate)
            assert all(r.mode != "unchanged" for r in runs), runs

        def after_late_session(at_the_end: bool) -> float:
            n = next(late)
            lake.append(
                replace(SMALL, seed=100 + n, sensors=1, first_sensor=1 + n % SMALL.sensors,
                        sessions_per_sensor=1, start_time=SMALL.start_time + timedelta(hours=n))
            )  # fmt: skip
            reconstruct.run(lake.spark, lake.settings)
            return timed(cycle, at_the_end)

        ways = {"each model as it ends": False, "once at the walk's end": True}
        seconds: dict[str, list[float]] = {name: [] for name in ways}
        for measured in (False, True, True, True):
            for name, at_the_end in ways.items():
                took = after_late_session(at_the_end)
                if measured:
                    seconds[name].append(took)
    medians(
        seconds,
        "each model as it ends",
        lambda name: f"gold cycle of 3 models, results and run log committed {name:22}",
    )


if __name__ == "__main__":
    main()
