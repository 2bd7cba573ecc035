"""tests/integration/test_enqueue_and_claim.py on engines behind a transaction pooler
(conftest.py), less the test of a direct connection's session settings (behind a pooler
they are set per transaction: tests/integration/test_database_timeouts.py)."""

from tests.integration.test_enqueue_and_claim import *  # noqa: F403  (run here behind the pooler)

del test_acks_wait_for_the_flush_unless_told_otherwise  # noqa: F821
