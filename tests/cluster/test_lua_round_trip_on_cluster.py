"""Each typed script call round-trips on a cluster too, in its pair's slot
(tests/integration/lua_round_trip_scenarios.py)."""

from __future__ import annotations

import pytest

from tests.integration.lua_round_trip_scenarios import SCENARIOS


@pytest.mark.parametrize("call", list(SCENARIOS), ids=lambda c: c.SCRIPT)
def test_a_script_reads_what_its_call_sends_on_a_cluster(call, tq, valkey):
    SCENARIOS[call](tq.ctx.warm, valkey)
