"""Each typed script call round-trips on a single Valkey: what Python sends is what the
script reads, and every reply field is parsed (tests/integration/lua_round_trip_scenarios.py)."""

from __future__ import annotations

import pytest

from tests.integration.lua_round_trip_scenarios import SCENARIOS


@pytest.mark.parametrize("call", list(SCENARIOS), ids=lambda c: c.SCRIPT)
def test_a_script_reads_what_its_call_sends(call, tq, valkey):
    SCENARIOS[call](tq.ctx.warm, valkey)
