"""Silver: entity-conformed tables rebuilt from bronze (see issue: silver)."""
