"""Bronze: source-conformed tables, one row per record exactly as the source served it."""
