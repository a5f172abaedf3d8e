"""Every gold model, for `lakehouse run gold`; the runner orders them by what they read."""

from __future__ import annotations

from gold import sensor_daily, sensor_hourly, session_summary
from lakehouse.models import Model

MODELS: tuple[Model, ...] = (session_summary.MODEL, sensor_hourly.MODEL, sensor_daily.MODEL)
