"""Pure logic: no I/O. Property-tested (tests/unit)."""
