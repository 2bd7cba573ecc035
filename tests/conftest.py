"""The suite's fixtures live in tests/support/ (plain modules); this file only loads the
ones that are suite-wide as plugins. A conftest is never imported as a module."""

pytest_plugins = ["tests.support.hypothesis_profile", "tests.support.parallel",
                  "tests.support.stores"]
