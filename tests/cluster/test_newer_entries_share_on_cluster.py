"""Replacements kept for pushes and tombstones in their tenant's share, on a cluster: a pair's
`newer` entries and tombstones share its slot, and the index of lapses, in a slot of its own,
names the pairs of every master for the reaper to sweep
(tests/integration/test_newer_entries_share.py, run here as they are; the tests that limit
one server's maxmemory stay there)."""

from __future__ import annotations

from tests.integration.test_newer_entries_share import (  # noqa: F401  (run here on the cluster)
    reclaim_at_once,
    test_a_replacement_kept_for_a_leased_task_goes_with_its_lease,
    test_a_replacement_past_the_share_is_delivered_once_with_its_new_payload,
    test_lapsed_entries_and_tombstones_of_an_idle_pair_go_at_a_reaper_pass,
    test_tombstones_count_against_the_tenants_share,
)
