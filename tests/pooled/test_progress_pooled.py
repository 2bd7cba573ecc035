"""tests/integration/test_progress.py on engines behind a transaction pooler
(conftest.py)."""

from tests.integration.test_progress import *  # noqa: F403  (run here behind the pooler)
