"""tests/integration/test_release.py on engines behind a transaction pooler
(conftest.py)."""

from tests.integration.test_release import *  # noqa: F403  (run here behind the pooler)
