"""The feed's lock (``feed.feed_lock``): one run of a feed at a time, held on a connection
of its own outside the engine's pool (tests/integration/test_pool_of_one.py runs a feed
under it on a pool of one connection), released and closed on every way out."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.polling import eventually
from tierq.errors import Unavailable
from tierq.logic import feed

# the backends holding an advisory lock of the session's database
LOCK_HOLDERS = ("SELECT pid FROM pg_locks WHERE locktype = 'advisory'"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")


def holders(pg: Any) -> list[int]:
    return [r[0] for r in pg.execute(LOCK_HOLDERS).fetchall()]


def gone(pg: Any, pid: int) -> bool:
    """Whether the backend ``pid`` has ended (a closed connection's ends soon after)."""
    return pg.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                      (pid,)).fetchone()[0] == 0


def lockers(pg: Any) -> list[int]:
    """The backends whose last statement tried a feed's lock."""
    return [r[0] for r in pg.execute(
        "SELECT pid FROM pg_stat_activity WHERE query LIKE %s AND pid <> pg_backend_pid()",
        ("%pg_try_advisory_lock%",)).fetchall()]


def terminate(pg: Any, pid: int) -> None:
    """End the backend ``pid`` as a lost connection does, and wait until it is gone."""
    assert pg.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone()[0]


def test_the_lock_is_held_on_a_connection_of_its_own_closed_after_the_run(
        make_tq: Any, pg: Any) -> None:
    tq = make_tq()
    with feed.feed_lock(tq.ctx, "feed"):
        [pid] = holders(pg)
        with tq.db.connection() as pooled:  # (not one of the pool's)
            assert pooled.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"] != pid
    assert holders(pg) == []
    eventually(lambda: gone(pg, pid), timeout=5, what="the lock's connection closed")


def test_a_second_run_is_refused_and_leaves_no_connection(make_tq: Any, pg: Any) -> None:
    first, second = make_tq(), make_tq()
    with feed.feed_lock(first.ctx, "feed"):
        [holder] = holders(pg)
        with pytest.raises(feed.FeedBusy, match="feed 'feed' is in progress"), \
                feed.feed_lock(second.ctx, "feed"):
            pytest.fail("the lock was taken twice")
        eventually(lambda: lockers(pg) == [holder],
                   timeout=5, what="the refused attempt's connection closed")
        with feed.feed_lock(second.ctx, "other"):  # another feed's lock is its own
            assert len(holders(pg)) == 2
        assert holders(pg) == [holder]
    with feed.feed_lock(second.ctx, "feed"):
        pass


def test_a_run_that_raises_releases_the_lock(make_tq: Any, pg: Any) -> None:
    tq = make_tq()
    with pytest.raises(RuntimeError, match="the run failed"), feed.feed_lock(tq.ctx, "feed"):
        raise RuntimeError("the run failed")
    assert holders(pg) == []
    with feed.feed_lock(tq.ctx, "feed"):
        pass


def test_a_lock_whose_connection_is_lost_during_the_run(make_tq: Any, pg: Any) -> None:
    """The lock ended with its connection: a run that ends says so, a run that raises
    raises its own error; the feed can be locked again."""
    tq = make_tq()
    with pytest.raises(Unavailable), feed.feed_lock(tq.ctx, "feed"):
        [pid] = holders(pg)
        terminate(pg, pid)
    with pytest.raises(RuntimeError, match="the run failed"), feed.feed_lock(tq.ctx, "feed"):
        [pid] = holders(pg)
        terminate(pg, pid)
        raise RuntimeError("the run failed")
    with feed.feed_lock(tq.ctx, "feed"):
        assert len(holders(pg)) == 1
