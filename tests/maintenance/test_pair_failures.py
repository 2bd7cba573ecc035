"""Which error replies fail one pair and which end a maintenance pass (pair_failures.py)."""

from __future__ import annotations

import pytest
import redis

from tierq.dal.valkey_replies import server_wide


@pytest.mark.parametrize(("reply", "whole_server"), [
    (redis.exceptions.ResponseError("WRONGTYPE Operation against a key holding the wrong "
                                    "kind of value script: abc"), False),
    (redis.exceptions.ResponseError("ERR Error running script (call to f_abc)"), False),
    (redis.exceptions.ResponseError("BUSYKEY Target key name already exists."), False),
    (redis.exceptions.ResponseError("BUSY Redis is busy running a script."), True),
    (redis.exceptions.ResponseError("MASTERDOWN Link with MASTER is down"), True),
    (redis.exceptions.ReadOnlyError("You can't write against a read only replica."), True),
    (redis.exceptions.NoPermissionError("this user has no permissions"), True),
    (redis.exceptions.NoScriptError("No matching script."), True),
    (redis.exceptions.MovedError("3999 127.0.0.1:6381"), True),
    (redis.exceptions.TryAgainError("Multiple keys request during rehashing of slot"), True),
    (redis.exceptions.ClusterDownError("The cluster is down"), True),
])
def test_a_reply_for_the_whole_server_ends_the_pass_one_for_a_pair_does_not(
        reply: redis.exceptions.ResponseError, whole_server: bool) -> None:
    assert server_wide(reply) is whole_server
