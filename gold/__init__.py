"""Gold: business-conformed aggregates over silver, one model per table (`lakehouse run gold`)."""
