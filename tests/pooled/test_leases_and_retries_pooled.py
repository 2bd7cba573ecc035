"""tests/integration/test_leases_and_retries.py on engines behind a transaction pooler
(conftest.py)."""

from tests.integration.test_leases_and_retries import *  # noqa: F403  (run here behind the pooler)
