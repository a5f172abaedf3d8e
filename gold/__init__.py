"""Gold: business-conformed aggregates over silver, one model per table, run by `lakehouse run gold`."""
