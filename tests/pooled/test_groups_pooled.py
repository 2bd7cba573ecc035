"""tests/integration/test_groups.py on engines behind a transaction pooler
(conftest.py)."""

from tests.integration.test_groups import *  # noqa: F403  (run here behind the pooler)
