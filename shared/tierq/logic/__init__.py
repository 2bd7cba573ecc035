"""Queue operations: the rules of DESIGN §2-§3 over the data access of ``tierq.dal``."""
