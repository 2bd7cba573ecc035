"""A claim's reply lost after its master ran it leaves no lease held by nobody, on a
three-master cluster: redis-py's cluster client sends a pop again after the reset, and its
pipeline sends each pop of the reset connection again alone
(tests/integration/lost_claim_reply_scenarios.py)."""

from __future__ import annotations

from tests.integration.test_lost_claim_reply import (  # noqa: F401  (run here on the cluster)
    test_a_lost_reply_of_a_later_pair_holds_the_leases_units_alone,
    test_a_lost_reply_of_a_pipeline_of_pops_gives_every_pairs_leases_back,
    test_a_lost_reply_of_one_tenants_pop_gives_its_leases_back,
    test_a_lost_reply_pops_no_more_once_the_claims_time_is_up,
    test_a_lost_reply_under_a_bigger_grant_holds_the_leases_units_alone,
    test_a_lost_reply_under_max_leased_frees_its_capacity_too,
    test_a_reply_lost_twice_leaves_the_tasks_in_line,
)
