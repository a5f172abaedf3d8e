"""Gold: business-conformed aggregates over silver (see issue: gold)."""
