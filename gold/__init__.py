"""Gold: business-conformed aggregates over silver, one model per file, named after its table."""
