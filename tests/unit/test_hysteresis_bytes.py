"""The hysteresis thresholds applied to the bytes of task data a warm set holds
(warm_max_bytes), as the Lua scripts apply them (lua/push_ready.lua, admission_mode.lua)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tierq.core import hysteresis

held = st.integers(min_value=0, max_value=1 << 41)
limits = st.integers(min_value=1024, max_value=1 << 40)


@given(held, limits)
def test_promotion_by_bytes_only_below_ninety_percent_and_never_overfills(ready_bytes, limit):
    room = hysteresis.promotion_room_bytes(ready_bytes, limit)
    if ready_bytes * 10 >= limit * 9:
        assert room == 0 and not hysteresis.may_promote_bytes(ready_bytes, limit)
    else:
        assert room > 0 and ready_bytes + room == limit


@given(held, limits)
def test_bytes_have_the_same_dead_band(ready_bytes, limit):
    """Between 80% and 100% of warm_max_bytes a cold pair stays cold and a warm one warm."""
    goes_cold = hysteresis.goes_cold_bytes(ready_bytes, limit)
    returns = hysteresis.may_return_warm_bytes(ready_bytes, limit)
    assert goes_cold == (ready_bytes >= limit)
    assert returns == (ready_bytes * 10 <= limit * 8)
    assert not (goes_cold and returns)
    if limit * 8 < ready_bytes * 10 and ready_bytes < limit:
        assert not goes_cold and not returns
