"""tests/integration/test_flows.py on engines behind a transaction pooler
(conftest.py)."""

from tests.integration.test_flows import *  # noqa: F403  (run here behind the pooler)
