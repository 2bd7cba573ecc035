"""A pair's drained move to another shard: the explicit way a (queue, tenant) changes home.

A home never changes by itself (``tierq.logic.homes``); an operator moves a pair, e.g. off
a shard whose name is to be removed or off a busy writer (``tierq shards move``). Its
tasks are not copied: the pair stops taking new work, its tasks are worked off where they
are, and only a pair with nothing left on its old home gets its new one. Steps, each safe
to run again (a move that stopped half way is finished, or given up, by running it again):

1. **Close.** Every shard's copy of the pair's home records the move (``moving_to``); every
   shard must answer. From then on a lookup for new work (enqueue, bulk load, schedule)
   answers 503 ``pair_moving``; claims, acks, nacks, heartbeats and status still go to the
   old home, whose tasks are worked off as usual.
2. **Settle.** Wait as long as a process may trust a home it read before (the home cache,
   ``TIERQ_HOME_CACHE_SECONDS``): after that, no process sends new work to the old home.
3. **Drain.** Wait until the old home holds nothing of the pair but finished tasks: no
   delayed, ready or leased task, no dead letter, no schedule, no bulk chunk or admission
   in flight. A pair with schedules or dead letters is refused up front (delete the
   schedules and put them again after the move; replay or purge the dead letters). Past
   the drain limit the move is given up: the pair is reopened on its old home.
4. **Switch.** On the old home, in one transaction holding the pair's home record and
   registration: nothing left, so the registration goes and the record names the new home
   (still closed to new work); then every other shard's copy. A bulk chunk holds the record
   shared while it writes, so the switch counts its rows or the chunk finds the pair gone.
5. **Open.** After the tenant lists cached by the shards' engines have expired
   (``TIERQ_SETTINGS_CACHE_SECONDS``: then a queue-wide claim on the old home does not look
   at the pair), every copy opens the pair on its new home.

Finished tasks stay on the old home (their ids name that shard, so their status is still
answered) until the retention purge removes them. Task ids are not reused across shards, so
nothing of the pair's past is confused with what the new home makes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tierq.dal.store.rows import HomeState, PairLeftRow
from tierq.errors import Conflict, InvalidInput, NotFound
from tierq.logic.homes import SHARD_ERRORS, HomeConflict, HomeRegistry, ShardDown
from tierq.logic.pairs import register_pairs

Say = Callable[[str], None]


class MoveRefused(Conflict):
    """The pair cannot be moved now (it holds schedules or dead letters, or another move of
    it is under way); nothing changed."""

    code = "move_refused"


class MoveTimedOut(Conflict):
    """The pair did not drain within the limit: the move was given up and the pair takes
    new work on its old home again."""

    code = "move_timed_out"


@dataclass(frozen=True)
class MoveTimings:
    """How long each waiting step lasts. ``settle_seconds`` must be at least the home cache
    of every process of the deployment, ``tenants_settle_seconds`` at least their tenant
    lists' cache (both are settings the deployment shares)."""

    settle_seconds: float
    tenants_settle_seconds: float
    drain_seconds: float = 600.0
    poll_seconds: float = 1.0

    def __post_init__(self) -> None:
        for name in ("settle_seconds", "tenants_settle_seconds", "drain_seconds"):
            if getattr(self, name) < 0:
                raise InvalidInput(f"{name} must be ≥ 0, got {getattr(self, name)}")
        if self.poll_seconds <= 0:
            raise InvalidInput(f"poll_seconds must be > 0, got {self.poll_seconds}")


@dataclass(frozen=True)
class MoveSummary:
    queue: str
    tenant: str
    from_shard: str
    to_shard: str
    moved: bool  # False: the pair already lived on to_shard
    drain_seconds: float = 0.0


def describe(left: PairLeftRow) -> str:
    parts = [f"{n} {what}" for n, what in (
        (left.delayed, "delayed"), (left.cold, "cold"), (left.warm, "ready or leased"),
        (left.dead, "dead letters"), (left.schedules, "schedules")) if n]
    return ", ".join(parts) or "nothing"


class PairMove:
    """One pair's move over ``homes`` (the registry of the deployment's shards).
    ``admissions_in_flight()`` counts the pair's admissions registered in the warm tier
    (a bulk load, a cold enqueue between its commit and its end)."""

    def __init__(self, homes: HomeRegistry, queue: str, tenant: str, to: str, *,
                 timings: MoveTimings, admissions_in_flight: Callable[[], int],
                 say: Say | None = None, sleep: Callable[[float], None] = time.sleep,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        if not homes.sharded:
            raise InvalidInput("a deployment with one shard has nowhere to move a pair to")
        if to not in homes.shards:
            raise InvalidInput(f"no shard named {to!r} (shards: {', '.join(homes.names)})",
                               details=[{"field": "to", "message": "not a shard's name"}])
        self.homes = homes
        self.queue = queue
        self.tenant = tenant
        self.to = to
        self.timings = timings
        self.in_flight = admissions_in_flight
        self.say = say or (lambda _message: None)
        self.sleep = sleep
        self.monotonic = monotonic

    # -- the steps -----------------------------------------------------------------------

    def run(self) -> MoveSummary:
        view = self._copies()
        to = self.to
        if view.moving_elsewhere(to):
            raise MoveRefused(f"queue {self.queue!r} of tenant {self.tenant!r} is already "
                              f"moving to shard {view.moving_to!r}: finish that move (run it "
                              "again with that shard) or give it up first")
        if view.switched:
            # switched on the old home (and maybe some copies) before a stop: finish it
            self.say(f"({self.queue}, {self.tenant}) has switched to shard {to}: finishing "
                     "the move")
            self._switch_copies()
            self._open()
            return MoveSummary(self.queue, self.tenant, view.old_home or to, to, moved=True)
        home = view.home
        if home == to:
            self.say(f"({self.queue}, {self.tenant}) already lives on shard {to}")
            return MoveSummary(self.queue, self.tenant, home, to, moved=False)
        if view.moving_to is None:
            self._refuse_what_cannot_drain(home)
        self._close(home)
        waited = self._drain(home)
        self._switch_copies()
        self._open()
        return MoveSummary(self.queue, self.tenant, home, to, moved=True,
                           drain_seconds=round(waited, 3))

    def give_up(self) -> bool:
        """Give up a move that has not switched: the pair takes new work on its home again.
        Whether there was one to give up."""
        view = self._copies()
        if view.moving_to is None:
            return False
        if view.switched:
            raise MoveRefused(f"queue {self.queue!r} of tenant {self.tenant!r} has already "
                              f"switched to shard {view.moving_to!r}: run the move again to "
                              "finish it")
        self._reopen(view.home, view.moving_to)
        return True

    def _copies(self) -> Copies:
        """Every shard's copy of the pair's home (each must answer): a stopped move can
        leave them in different steps, and the first one read may be behind."""
        states = {name: self._on(name, lambda store: store.home_state(self.queue, self.tenant))
                  for name in self.homes.names}
        return Copies(self.queue, self.tenant, states)

    def _refuse_what_cannot_drain(self, home: str, left: PairLeftRow | None = None) -> None:
        """Refuse (MoveRefused) what a drain would wait for in vain: schedules and dead
        letters (they never go on their own), delayed tasks due after the drain limit."""
        if left is None:
            left = self._on(home, lambda store: store.pair_left(self.queue, self.tenant))
        pair = f"queue {self.queue!r} of tenant {self.tenant!r}"
        if left.schedules or left.dead:
            raise MoveRefused(
                f"{pair} has {describe(left)} on shard {home!r}; a move waits only for "
                "tasks to be worked off",
                details=[{"field": field, "message": message}
                         for field, count, message in (
                             ("schedules", left.schedules,
                              "delete them, and put them again after the move (they then "
                              "live on the new home)"),
                             ("dead", left.dead, "replay or purge them first"))
                         if count])
        limit = time.time() + self.timings.drain_seconds
        if left.delayed_until is not None and left.delayed_until.timestamp() > limit:
            raise MoveRefused(
                f"{pair} has delayed tasks due as late as {left.delayed_until.isoformat()}, "
                f"after the drain limit of {self.timings.drain_seconds:g} s",
                details=[{"field": "drain_seconds",
                          "message": "give the move more time, or wait until they are due"}])

    def _close(self, home: str) -> None:
        order = [self.homes.default] + [n for n in self.homes.names if n != self.homes.default]
        closed: list[str] = []
        try:
            for name in order:
                state = self._on(name, lambda store: store.home_close(
                    self.queue, self.tenant, home, self.to))
                if state != HomeState(home, self.to):
                    raise MoveRefused(
                        f"shard {name!r} records queue {self.queue!r} of tenant "
                        f"{self.tenant!r} as {_shown(state)}, not on {home!r}: another move "
                        "ran meanwhile; look again")
                closed.append(name)
        except (ShardDown, MoveRefused):
            self._reopen(home, self.to, only=closed)
            raise
        self.homes.invalidate(self.queue, self.tenant)
        self.say(f"({self.queue}, {self.tenant}) closed to new work on every shard; waiting "
                 f"{self.timings.settle_seconds:g} s for every process to see it")
        self.sleep(self.timings.settle_seconds)

    def _drain(self, home: str) -> float:
        started = self.monotonic()
        deadline = started + self.timings.drain_seconds
        last = ""
        while True:
            try:
                now_left, left = self._left_or_switched(home)
            except ShardDown as exc:  # a busy or restarting shard: looked at again
                now_left, left = f"shard {home} not answering ({exc.message})", None
            if left is None and now_left == "":
                self.say(f"({self.queue}, {self.tenant}) drained on shard {home}; its home "
                         f"is now shard {self.to}")
                return self.monotonic() - started
            if left is not None:
                try:  # a dead letter or schedule made meanwhile would never drain
                    self._refuse_what_cannot_drain(home, left)
                except MoveRefused:
                    self._reopen(home, self.to)
                    raise
            if now_left != last:
                self.say(f"waiting for ({self.queue}, {self.tenant}) to drain on shard "
                         f"{home}: {now_left} left")
                last = now_left
            if self.monotonic() >= deadline:
                self._reopen(home, self.to)
                raise MoveTimedOut(
                    f"queue {self.queue!r} of tenant {self.tenant!r} did not drain on shard "
                    f"{home!r} within {self.timings.drain_seconds:g} s ({now_left} left); "
                    "the move is given up and the pair takes new work there again")
            self.sleep(self.timings.poll_seconds)

    def _left_or_switched(self, home: str) -> tuple[str, PairLeftRow | None]:
        """What is left of the pair on ``home`` (described), or ("", None) once the switch
        committed there."""
        left = self._on(home, lambda store: store.pair_left(self.queue, self.tenant))
        if left.total:
            return describe(left), left
        in_flight = self.in_flight()  # only once no task is left: a Valkey round trip
        if in_flight:
            return f"{in_flight} admissions in flight", left
        switched = self._on(home, lambda store: store.pair_switch_drained(
            self.queue, self.tenant, self.to, home))
        if switched == HomeState(self.to, self.to):
            return "", None
        if isinstance(switched, PairLeftRow):
            return describe(switched), switched
        # forgotten as idle meanwhile and born again, or another move
        self._reopen(home, self.to)
        raise MoveRefused(f"shard {home!r} records queue {self.queue!r} of tenant "
                          f"{self.tenant!r} as {_shown(switched)} now: its home changed "
                          "during the move; look again")

    def _switch_copies(self) -> None:
        """Every copy names the new home (the old home's was switched in its drained
        transaction): a copy that records the move switches, a missing one is written; a
        copy in any other state stops the move before the pair is opened."""
        for name in [self.to] + [n for n in self.homes.names if n != self.to]:
            state = self._finish_on(name, lambda store: store.home_switch(
                self.queue, self.tenant, self.to))
            if state is None or state.shard != self.to:
                raise HomeConflict(
                    f"shard {name!r} records queue {self.queue!r} of tenant "
                    f"{self.tenant!r} as {_shown(state)} while the move to {self.to!r} has "
                    "switched; the pair takes no new work until the copies agree")

    def _open(self) -> None:
        self.say(f"waiting {self.timings.tenants_settle_seconds:g} s for the shards' "
                 "engines to stop listing the pair on its old home")
        self.sleep(self.timings.tenants_settle_seconds)
        # registered on its new home before it opens: a process that still remembers the
        # pair as registered there (it lived there before) would not register it again
        self._finish_on(self.to, lambda store: register_pairs(
            store, self.queue, [self.tenant], now=time.time(), cap=0))
        for name in [self.to] + [n for n in self.homes.names if n != self.to]:
            self._finish_on(name, lambda store: store.home_open(
                self.queue, self.tenant, self.to))
        self.homes.invalidate(self.queue, self.tenant)
        self.say(f"({self.queue}, {self.tenant}) takes new work on shard {self.to}")

    def _reopen(self, home: str, to: str, only: list[str] | None = None) -> None:
        """Give the move up on the shards that answer; one that does not keeps the pair
        closed until the move is run or given up again (it refuses new work: safe)."""
        missed = []
        for name in self.homes.names if only is None else only:
            try:
                self._on(name, lambda store: store.home_reopen(self.queue, self.tenant,
                                                               home, to))
            except ShardDown:
                missed.append(name)
        self.homes.invalidate(self.queue, self.tenant)
        if missed:
            self.say(f"shard(s) {', '.join(missed)} did not answer: the pair stays closed "
                     "there until the move is given up again")

    # -- calls on one shard ------------------------------------------------------------------

    def _on(self, name: str, call: Callable[..., object]) -> Any:
        try:
            return self.homes.run_on(name, call)
        except SHARD_ERRORS as exc:
            raise ShardDown(name, detail=str(exc)) from exc

    def _finish_on(self, name: str, call: Callable[..., object]) -> Any:
        try:
            return self._on(name, call)
        except ShardDown as exc:
            raise ShardDown(name, detail=exc.detail,
                            why="does not answer; the move has switched on the old home: run "
                                "it again to finish it (until then the pair takes no new "
                                "work)") from exc


def _shown(state: HomeState | None) -> str:
    if state is None:
        return "without a home"
    if state.moving_to is None:
        return f"living on {state.shard!r}"
    return f"living on {state.shard!r}, moving to {state.moving_to!r}"


@dataclass(frozen=True)
class Copies:
    """Every shard's copy of one pair's home."""

    queue: str
    tenant: str
    states: dict[str, HomeState | None]

    def _recorded(self) -> list[HomeState]:
        return [s for s in self.states.values() if s is not None]

    @property
    def moving_to(self) -> str | None:
        """The shard a move under way goes to (None: none); copies naming two moves are a
        conflict."""
        targets = {s.moving_to for s in self._recorded() if s.moving_to is not None}
        if len(targets) > 1:
            raise HomeConflict(f"the shards record moves of queue {self.queue!r} of tenant "
                               f"{self.tenant!r} to {', '.join(sorted(targets))}")
        return next(iter(targets), None)

    def moving_elsewhere(self, to: str) -> bool:
        return self.moving_to not in (None, to)

    @property
    def switched(self) -> bool:
        """A move's switch has begun: some copy names the shard it moves to as the home
        while still closed."""
        return any(s.moving_to is not None and s.shard == s.moving_to
                   for s in self._recorded())

    @property
    def old_home(self) -> str | None:
        """The home a move under way leaves, as a copy not switched yet records it."""
        return next((s.shard for s in self._recorded()
                     if s.moving_to is not None and s.shard != s.moving_to), None)

    @property
    def home(self) -> str:
        """The one home every copy records (a move not switched: the old one)."""
        homes = {s.shard for s in self._recorded()}
        if not homes:
            raise NotFound(f"queue {self.queue!r} of tenant {self.tenant!r} has no home: it "
                           "has never had work (its first task goes to the shard its "
                           "ranking names)")
        if len(homes) > 1:
            raise HomeConflict(f"the shards record queue {self.queue!r} of tenant "
                               f"{self.tenant!r} as living on {', '.join(sorted(homes))}")
        return homes.pop()
