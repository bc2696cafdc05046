"""The built-in rules, one per module, found by `rules.discovery` (docs/rules.md)."""
