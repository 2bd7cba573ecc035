"""A push that comes after a cancel or delete leaves the task out, on a cluster: the
tombstones share the pair's slot (tests/integration/test_cancel_races.py, run here as
they are)."""

from __future__ import annotations

from tests.integration.test_cancel_races import (  # noqa: F401  (run here on the cluster)
    cancel_before_push,
    purge_before_push,
    test_a_cancel_that_postgres_fails_after_the_removal_leaves_the_task_to_run_later,
    test_a_cancel_that_valkey_fails_changes_nothing_and_its_retry_finishes,
    test_a_promotion_whose_push_comes_after_a_cancel_does_not_run_it,
    test_a_push_that_comes_after_a_purge_puts_nothing_back,
    test_a_push_that_comes_after_a_replace_into_the_future_does_not_run_it_early,
    test_a_release_whose_push_comes_after_a_cancel_does_not_run_it,
    test_a_replace_into_the_future_pushes_the_task_again_when_due,
    test_a_replace_that_brings_a_task_sooner_lowers_its_tombstone,
    test_a_restore_whose_push_comes_after_a_cancel_does_not_run_it,
    test_an_enqueue_whose_push_comes_after_a_cancel_does_not_run_it,
    valkey_fails_once,
)
