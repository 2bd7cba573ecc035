"""tests/integration/test_tenant_statements.py on engines behind a transaction pooler
(conftest.py)."""

from tests.integration.test_tenant_statements import *  # noqa: F403  (run here behind the pooler)
