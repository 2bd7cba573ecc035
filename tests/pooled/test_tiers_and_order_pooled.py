"""tests/integration/test_tiers_and_order.py on engines behind a transaction pooler
(conftest.py)."""

from tests.integration.test_tiers_and_order import *  # noqa: F403  (run here behind the pooler)
