"""Queue operations: the rules of docs/architecture.md §2-§4 over the data access of
``tierq.dal``."""
