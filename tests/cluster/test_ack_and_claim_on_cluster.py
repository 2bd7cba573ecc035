"""An ack that claims the next tasks on a three-master cluster: the tests of one Valkey
(tests/integration/test_ack_and_claim.py) again, with this folder's stores. The drop rides
in the claim's pipeline, routed to its pair's master."""

from __future__ import annotations

from tests.integration.test_ack_and_claim import (  # noqa: F401 (collected here again)
    test_a_claim_that_sends_nothing_sends_the_drop_alone,
    test_a_failed_drop_is_the_answer_and_the_claimed_tasks_go_back,
    test_an_ack_without_its_lease_is_rejected_and_the_claim_runs,
    test_the_ack_is_done_and_the_next_tasks_leased,
    test_the_drop_rides_in_the_claim_s_round_trip,
)
