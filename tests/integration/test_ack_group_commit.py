"""Acks committed together on one Valkey (tests/integration/ack_gathering_scenarios.py)."""

from __future__ import annotations

import pytest

from tests.integration import ack_gathering_scenarios as scenarios


def test_acks_that_meet_are_one_commit(make_tq, valkey, pg):
    scenarios.many_acks_one_commit(make_tq, valkey, pg)


def test_acks_of_a_stopped_committer_commit_alone(make_tq, valkey, pg):
    scenarios.a_stopped_committer(make_tq, valkey, pg)


def test_a_failed_commit_fails_its_own_ack_only(make_tq, valkey, pg, monkeypatch):
    scenarios.a_failed_commit(make_tq, valkey, pg, monkeypatch)


def test_a_group_acked_by_another_s_commit_goes_on(make_tq, valkey):
    scenarios.groups_go_on(make_tq, valkey)


def test_one_tenant_s_committer_never_delays_another_s_ack(make_tq, valkey):
    scenarios.tenants_apart(make_tq, valkey)


@pytest.mark.parametrize("path", ["joined", "too large to join", "gathering off"])
def test_an_item_the_split_refuses_is_rejected_once(make_tq, monkeypatch, path):
    """A task named twice is refused when the ack's items are split by tenant
    (``leases.by_tenant``) and answered once, whether the ack then joins its pair's
    mailbox, checks alone because it is too large to join, or has no gathering."""
    from tierq.dal.lua_calls import AckCheckJoin

    tq = make_tq(ack_group_commit=path != "gathering off")
    if path == "too large to join":
        monkeypatch.setattr(AckCheckJoin, "items_per_call", classmethod(lambda cls: 1))
    tq.enqueue(scenarios.QUEUE, [{"payload": i, "tenant": "a"} for i in range(2)])
    got = tq.claim(scenarios.QUEUE, max=2, tenant="a")
    result = tq.ack(scenarios.QUEUE, [*got, got[0]])
    assert sorted(map(str, result.acked)) == sorted(str(t.id) for t in got)
    assert [(str(r.id), r.reason) for r in result.rejected] == [(str(got[0].id), "not_owner")]
    assert tq.ctx.ack_commits.commits == (path == "joined")  # (the path it took)


@pytest.mark.parametrize("batch_rows", [False, True], ids=["rows", "batch-rows"])
def test_two_acks_of_one_task_answer_it_once(make_tq, valkey, batch_rows):
    """A retried ack gathered with the first: the committer sets it apart, and it goes
    alone after the first's commit. On batch rows its tasks are members, which it finds
    ended (logic/ack_gathering._already_ended) where with rows it deletes nothing."""
    scenarios.one_task_twice(lambda **kw: make_tq(batch_rows=batch_rows, **kw), valkey,
                             members=batch_rows)


def test_a_later_pass_that_fails_keeps_the_committer_s_answer(make_tq, valkey, pg, monkeypatch):
    scenarios.a_later_pass_fails(make_tq, valkey, pg, monkeypatch)


def test_the_gathering_needs_a_statement_timeout():
    from tierq.config import Settings, SettingsError

    with pytest.raises(SettingsError, match="=true needs TIERQ_STATEMENT_TIMEOUT_MS > 0"):
        Settings(database_url="postgresql://x", ack_group_commit=True, statement_timeout_ms=0)
    assert Settings(database_url="postgresql://x", ack_group_commit=True).ack_group_commit


def test_the_gathering_is_on_by_default_where_a_statement_timeout_bounds_it():
    """Unset, it is on wherever a statement timeout bounds a committer's lock: a timeout of 0
    (no limit) alone turns it off, where the setting given true with it is refused (above);
    a copy with another timeout decides again, one given false stays off."""
    from tierq.config import Settings, SettingsError

    unset = Settings.from_environ({}, database_url="postgresql://x")
    assert unset.ack_group_commit is None and unset.gathers_acks
    # (the template passes its parameter as given: empty when not set)
    blank = Settings.from_environ({"TIERQ_ACK_GROUP_COMMIT": " "}, database_url="postgresql://x")
    assert blank.ack_group_commit is None and blank.gathers_acks
    no_limit = Settings.from_environ({"TIERQ_STATEMENT_TIMEOUT_MS": "0"},
                                     database_url="postgresql://x")
    assert not no_limit.gathers_acks
    assert not unset.replace(statement_timeout_ms=0).gathers_acks
    assert no_limit.replace(statement_timeout_ms=15_000).gathers_acks
    off = Settings.from_environ({"TIERQ_ACK_GROUP_COMMIT": "false"}, database_url="postgresql://x")
    assert not off.gathers_acks and not off.replace(statement_timeout_ms=0).gathers_acks
    with pytest.raises(SettingsError, match="leave TIERQ_ACK_GROUP_COMMIT unset"):
        unset.replace(ack_group_commit=True, statement_timeout_ms=0)


def test_an_ack_alone_is_its_check_its_pass_and_its_drop(make_tq):
    """No other ack meets it: it checks and joins in one call, commits, then drops its
    leases and lets the lock go (ack_pass.lua) in one round trip: as many Valkey round
    trips as without the gathering (test_ack_round_trips.py)."""
    from tests.integration.helpers import counted_sends

    tq = make_tq(ack_group_commit=True)
    tq.enqueue(scenarios.QUEUE, [{"payload": i, "tenant": "a"} for i in range(4)])
    first, *rest = tq.claim(scenarios.QUEUE, max=4, tenant="a")
    tq.ack(scenarios.QUEUE, [first])  # (not counted: it loads the scripts)
    with counted_sends(tq) as wire:
        result = tq.ack(scenarios.QUEUE, rest)
    assert len(result.acked) == 3
    assert wire.sends == 2, (wire.sends, dict(wire.commands))
    assert wire.commands["ack_check_join"] == 1 and wire.commands["ack_pass"] == 1
    assert tq.ctx.ack_commits.commits == 2 and tq.ctx.ack_commits.answered == 0


def test_a_slow_committer_s_ack_deletes_alone_after_its_wait(make_tq, valkey, pg):
    scenarios.a_slow_committer(make_tq, valkey, pg)


def test_acks_naming_a_task_an_earlier_one_names_commit_alone():
    from tierq.logic.ack_gathering import Entry, _apart

    first, second, third = (Entry.parse(t) for t in ("r1 a,b 1,1", "r2 c 1", "r3 b,d 2,1"))
    carried: set[str] = set()
    assert _apart([first, second, third], carried) == ([first, second], [third])
    assert carried == {"a", "b", "c"}
    assert _apart([third, first], set()) == ([third], [first])
    # a later pass: an ack naming a task an earlier pass carried (a retry) goes alone too
    fourth, fifth = Entry.parse("r4 a 1"), Entry.parse("r5 e 1")
    assert _apart([fourth, fifth], carried) == ([fifth], [fourth])
    assert carried == {"a", "b", "c", "e"}
