"""Acks committed together on a three-master cluster: the tests of one Valkey
(tests/integration/test_ack_group_commit.py) again, with this folder's stores."""

from __future__ import annotations

from tests.integration.test_ack_group_commit import (  # noqa: F401 (collected here again)
    test_a_failed_commit_fails_its_own_ack_only,
    test_a_group_acked_by_another_s_commit_goes_on,
    test_a_later_pass_that_fails_keeps_the_committer_s_answer,
    test_a_slow_committer_s_ack_deletes_alone_after_its_wait,
    test_acks_of_a_stopped_committer_commit_alone,
    test_acks_that_meet_are_one_commit,
    test_an_ack_alone_is_its_check_its_pass_and_its_drop,
    test_one_tenant_s_committer_never_delays_another_s_ack,
    test_two_acks_of_one_task_answer_it_once,
)
