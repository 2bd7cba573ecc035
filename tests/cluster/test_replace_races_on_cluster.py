"""A push that comes after a replace writes the replacement, on a cluster: the `newer`
entries share the pair's slot (tests/integration/test_replace_races.py, run here as they
are)."""

from __future__ import annotations

from tests.integration.test_replace_races import (  # noqa: F401  (run here on the cluster)
    test_a_promotions_push_after_a_replace_writes_the_new_payload,
    test_a_push_that_read_a_later_readiness_keeps_its_own_blob,
    test_a_releases_push_after_a_replace_writes_the_new_payload,
    test_a_restores_push_after_a_replace_writes_the_new_payload,
    test_an_enqueues_own_push_after_a_replace_writes_the_new_payload,
)
