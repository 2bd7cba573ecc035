"""Ordering without a cliff, on a cluster: places past 2^53 (a batch's members and keyed
tasks too) and on both sides of the split between the member forms, a warm tier written by
the previous version, and the end of the sequence run here as they are
(tests/integration/test_ordering_headroom.py)."""

from __future__ import annotations

from tests.integration.test_ordering_headroom import (  # noqa: F401  (run here on the cluster)
    test_a_batchs_members_and_keyed_tasks_keep_their_places_past_2_53,
    test_a_warm_tier_written_by_the_previous_version_keeps_its_order,
    test_order_holds_past_2_53_across_both_tiers_and_priorities,
    test_places_on_both_sides_of_the_split_make_one_line,
    test_the_end_of_the_sequence_fails_each_statement_before_it_commits,
)
