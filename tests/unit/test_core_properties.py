"""Property-based tests of the pure parts: backoff, places in the ready set, hysteresis, the NUL
check on JSON text."""

from __future__ import annotations

import uuid

import orjson
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tierq.core import hysteresis
from tierq.core.backoff import BackoffPolicy
from tierq.core.ids import attempt_of_token, new_token_prefix, tenant_of_token, uuid7
from tierq.core.json_text import has_nul
from tierq.core.ordering import (
    PRIORITY_MAX,
    SEQ_MAX,
    SEQ_STEP,
    SPLIT,
    Place,
    place,
    task_of,
    unpack,
)
from tierq.dal.warm_tier import claim_prefix, lease_member, split_member

kinds = st.sampled_from(["fixed", "linear", "exponential"])
bases = st.floats(min_value=0, max_value=1e4, allow_nan=False)
caps = st.floats(min_value=0, max_value=1e6, allow_nan=False)
jitters = st.floats(min_value=0, max_value=1, allow_nan=False)
attempts = st.integers(min_value=1, max_value=5000)
unit = st.floats(min_value=0, max_value=1, exclude_max=True, allow_nan=False)


@given(kinds, bases, caps, jitters, attempts, unit)
def test_backoff_stays_within_jitter_band_and_cap(kind, base, cap, jitter, attempt, r):
    assume(cap >= base)
    policy = BackoffPolicy(kind, base, cap, jitter)
    raw = policy.raw_delay(attempt)
    delay = policy.delay(attempt, rand=lambda: r)
    assert 0 <= delay <= cap
    assert raw * (1 - jitter) - 1e-9 <= delay <= min(cap, raw * (1 + jitter)) + 1e-9


@given(kinds, bases, caps, attempts)
def test_backoff_without_jitter_never_decreases(kind, base, cap, attempt):
    assume(cap >= base)
    policy = BackoffPolicy(kind, base, cap, 0.0)
    assert policy.raw_delay(attempt) <= policy.raw_delay(attempt + 1)
    assert policy.delay(attempt) == policy.raw_delay(attempt)


def test_backoff_shapes():
    assert BackoffPolicy("fixed", 3, 100, 0).raw_delay(7) == 3
    assert BackoffPolicy("linear", 3, 100, 0).raw_delay(7) == 21
    assert BackoffPolicy("exponential", 3, 100, 0).raw_delay(3) == 12
    assert BackoffPolicy("exponential", 3, 100, 0).raw_delay(30) == 100
    with pytest.raises(ValueError):
        BackoffPolicy().raw_delay(0)


priorities = st.integers(min_value=0, max_value=PRIORITY_MAX)
# every seq a row can hold (tierq_task_seq's values, each opening a block of 512 places),
# with weight at the ends and around the split between the two member forms
LAST_SEQ = SEQ_MAX + SEQ_STEP - 1
seqs = st.one_of(st.integers(min_value=1, max_value=LAST_SEQ),
                 st.integers(min_value=SPLIT - 1024, max_value=SPLIT + 1024),
                 st.integers(min_value=1, max_value=1024),
                 st.integers(min_value=LAST_SEQ - 1024, max_value=LAST_SEQ),
                 st.integers(min_value=(1 << 53) - 1024, max_value=(1 << 53) + 1024))
task_ids = st.builds(lambda: str(uuid7()))


def as_valkey_orders(at: Place) -> tuple[float, bytes]:
    """A sorted set's order: the score as a double, then the member's bytes."""
    return float(at.score), at.member.encode()


@given(priorities, seqs, priorities, seqs, task_ids, task_ids)
def test_places_order_priority_first_then_fifo(p1, s1, p2, s2, id1, id2):
    assume(s1 != s2)  # (two tasks never share a seq)
    a, b = as_valkey_orders(place(p1, s1, id1)), as_valkey_orders(place(p2, s2, id2))
    if p1 != p2:
        assert (a < b) == (p1 > p2)  # higher priority pops first
    else:
        assert (a < b) == (s1 < s2)  # then enqueue order
    assert (a < b) == (place(p1, s1, id1) < place(p2, s2, id2))  # Python sorts the same


@given(priorities, seqs, task_ids)
def test_a_place_is_exact_in_a_double_and_round_trips(p, s, task_id):
    at = place(p, s, task_id)
    assert float(at.score) == at.score < 1 << 53  # Valkey stores scores as doubles
    assert unpack(float(at.score), at.member) == (p, s, task_id)
    assert task_of(at.member) == task_id
    assert (at.member == task_id) == (s < SPLIT)  # the short form: what older tierqs wrote


def test_place_rejects_what_no_row_holds():
    with pytest.raises(ValueError):
        place(10, 1, "x")
    with pytest.raises(ValueError):
        place(0, 0, "x")
    with pytest.raises(ValueError):
        place(0, LAST_SEQ + 1, "x")
    assert len(place(0, LAST_SEQ, "x").member) == 18  # 16 hex digits, '|', the id


def test_the_sequence_outlasts_a_century_of_one_statement_per_ready_transition():
    """The stated headroom (docs/architecture.md §2): 100,000 ready transitions a second,
    each its own statement taking one value of tierq_task_seq (SEQ_STEP places)."""
    seconds = SEQ_MAX / SEQ_STEP / 100_000
    assert seconds / (365.25 * 86400) > 5700


sizes = st.integers(min_value=0, max_value=100_000)
maxes = st.integers(min_value=1, max_value=100_000)


@given(sizes, maxes)
def test_promotion_only_below_ninety_percent_and_never_overfills(ready, warm_max):
    room = hysteresis.promotion_room(ready, warm_max)
    if ready >= 0.9 * warm_max:
        assert room == 0
    else:
        assert room > 0
        assert ready + room == warm_max


@given(sizes, maxes, st.integers(min_value=0, max_value=10), st.integers(0, 3))
def test_return_to_warm_needs_drained_cold_and_eighty_percent(ready, warm_max, cold, inflight):
    ok = hysteresis.may_return_warm(ready, warm_max, cold, inflight)
    assert ok == (cold == 0 and inflight == 0 and ready <= 0.8 * warm_max)


@given(st.sampled_from(["warm", "cold"]), sizes, maxes, st.integers(min_value=0, max_value=10_000))
def test_admission_never_exceeds_warm_max(mode, ready, warm_max, n):
    assume(ready <= warm_max)
    decision = hysteresis.admit(mode, ready, warm_max, n)
    assert decision.warm + decision.cold == n
    assert ready + decision.warm <= warm_max
    if mode == "cold":
        assert decision.warm == 0 and decision.mode_after == "cold"
    if decision.cold:
        assert decision.mode_after == "cold"
    if ready + decision.warm >= warm_max:
        assert decision.mode_after == "cold"


@given(st.integers(min_value=0, max_value=1000), st.integers(min_value=10, max_value=1000))
def test_hysteresis_has_a_dead_band(ready, warm_max):
    """Between 80% and 100% a cold queue stays cold and a warm one stays warm: no thrash."""
    if 0.8 * warm_max < ready < warm_max:
        assert not hysteresis.may_return_warm(ready, warm_max, 0, 0)
        assert not hysteresis.goes_cold(ready, warm_max)


def test_uuid7_is_time_ordered_and_version_7():
    ids = [uuid7() for _ in range(5000)]
    assert all(i.version == 7 for i in ids)
    assert ids == sorted(ids, key=lambda u: u.bytes)
    assert len(set(ids)) == len(ids)
    assert uuid7(now_ms=2_000_000_000_000) > uuid.UUID(int=0)


@given(st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}", fullmatch=True),
       st.integers(min_value=1, max_value=10_000), st.integers(min_value=1, max_value=500))
def test_lease_tokens_carry_their_tenant_attempt_and_claim(tenant, attempt, n):
    prefix = new_token_prefix(tenant)
    token = f"{prefix}{attempt}~{n}"
    assert tenant_of_token(token) == tenant
    assert attempt_of_token(token) == attempt
    assert claim_prefix(token) == prefix
    assert split_member(lease_member("some-id", token)) == ("some-id", token, attempt)


@pytest.mark.parametrize("token", ["", "abc", "~x~1", "acme~"])
def test_malformed_tokens_have_no_tenant(token):
    assert tenant_of_token(token) is None


@pytest.mark.parametrize("token", ["", "acme~x~1", "acme~x~a~1", "acme~x~²~1"])
def test_malformed_tokens_have_no_attempt(token):
    assert attempt_of_token(token) is None


# strings made of the pieces that matter: backslashes, the escape's letters, NUL
tricky_text = st.lists(st.sampled_from(["\\", "u0000", "\x00", "a", '"']),
                       max_size=8).map("".join)


@given(st.recursive(tricky_text | st.integers(min_value=-(2**63), max_value=2**63 - 1),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(tricky_text, inner, max_size=3), max_leaves=8))
def test_the_nul_check_finds_exactly_the_nul_characters(value):
    assert has_nul(orjson.dumps(value)) == _holds_nul(value)


def _holds_nul(value):
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, list):
        return any(_holds_nul(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    return False
