"""A dead letter replayed while the lease that dead-lettered it is still in Valkey, on a
three-master cluster: the tests of tests/integration/test_replay_leases.py run here as
they are."""

from __future__ import annotations

from tests.integration.test_replay_leases import (  # noqa: F401  (run here on the cluster)
    test_a_lease_a_failed_drop_left_does_not_dead_letter_the_replayed_task,
    test_a_replay_while_the_nacks_drop_is_on_its_way_is_in_line_at_once,
)
