"""Silver: entity-conformed tables rebuilt from bronze: sessions, their rows, violations."""
