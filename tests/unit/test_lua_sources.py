"""Warm-tier scripts are loaded with the shared pieces they include, once each."""

from __future__ import annotations

import re
from importlib import resources

from tierq.dal.warm_tier import (
    GONE_CHARGE,
    MARKER_CHARGE,
    MARKER_OWN_FIELDS,
    MARKERS_KEPT_AT_LEAST,
    NEWER_CHARGE,
    SCRIPTS,
    script_source,
)

LUA = resources.files("tierq.dal").joinpath("lua")


def test_an_included_piece_comes_first_and_once():
    text = script_source("push_ready")
    body = LUA.joinpath("push_ready.lua").read_text("utf-8")
    assert text.endswith(body)
    for piece in ("local function call_chunked", "local function warm_bytes"):
        assert text.count(piece) == 1
        assert piece in text[: len(text) - len(body)]


def test_a_shebang_stays_the_first_line():
    """Valkey reads script flags (``#!lua flags=allow-oom``) only from the first line."""
    text = script_source("claim")
    body = LUA.joinpath("claim.lua").read_text("utf-8")
    shebang, _, rest = body.partition("\n")
    assert shebang == "#!lua flags=allow-oom"
    assert text.startswith(shebang + "\n") and text.count("#!lua") == 1
    assert text.endswith(rest)
    assert "local function call_chunked" in text[: len(text) - len(rest)]


def test_a_script_without_includes_is_loaded_as_written():
    assert script_source("admission_end") == LUA.joinpath("admission_end.lua").read_text("utf-8")


def test_every_script_that_calls_a_shared_piece_includes_it():
    for name in SCRIPTS:
        body = LUA.joinpath(f"{name}.lua").read_text("utf-8")
        if "call_chunked(" in body:
            assert "-- include: call_chunked" in body, name
        if "warm_bytes(" in body:
            assert "-- include: warm_bytes" in body, name
        if "task_of(" in body or "waiting(" in body:
            assert "-- include: ready_member" in body, name
        if any(f"{piece}(" in body for piece in ("lease_held", "lease_drop", "lease_attempt")):
            # (lease_keys calls call_chunked: it is included after it)
            includes = re.findall(r"^-- include: (\w+)", body, re.M)
            assert "lease_keys" in includes, name
            assert includes.index("call_chunked") < includes.index("lease_keys"), name


# -- no script reads a whole set ---------------------------------------------------------------

# Commands that read every member or field of their key, whatever its size.
WHOLE_SET = {"HGETALL", "HKEYS", "HVALS", "SMEMBERS", "KEYS", "SORT", "SINTER", "SUNION",
             "SDIFF", "ZUNION", "ZINTER", "ZDIFF", "ZRANGESTORE"}
# Range reads that are bounded only with a LIMIT, and scans only with a COUNT.
NEEDS_LIMIT = {"ZRANGEBYSCORE", "ZREVRANGEBYSCORE", "ZRANGEBYLEX", "ZREVRANGEBYLEX"}
NEEDS_COUNT = {"SCAN", "HSCAN", "ZSCAN", "SSCAN"}
# Commands that remove (or free, on the main thread) as much of their key as it holds: a
# range by score or name, a pop of a count, a whole key deleted or replaced.
REMOVES_ANY = {"ZREMRANGEBYSCORE", "ZREMRANGEBYLEX", "DEL", "RENAME"}
POPS = {"ZPOPMIN", "ZPOPMAX", "SPOP"}  # bounded by their count: one needs a guard
# (script, command) -> why that call is bounded all the same
BOUNDED_BY_THEIR_GUARD = {
    ("warm_bytes", "HKEYS"): "a recount runs only while HLEN is at most "
                             "RECOUNT_UNKNOWN_AT_MOST",
    ("admission_mode", "ZREMRANGEBYSCORE"): "drops admissions gone stale (a few in flight)",
    ("admission_begin", "HGETALL"): "a pair's meta hash: its own fields and a record per "
                                    "admission about to push (stale ones dropped)",
    ("rate_tenants", "ZREMRANGEBYSCORE"): "drops tenants not noted for 1,020 s",
    ("running_page", "ZRANGE"): "index ranges of one entry (the search for the cursor) or "
                                "of at most the call's scan (a window of the page)",
    ("claim", "ZRANGE"): "the first `want` by rank, 0 .. want - 1: at most the claim's n "
                         "(its tasks, as ZPOPMIN's count would be)",
    ("claim", "ZREMRANGEBYRANK"): "the first n_taken by rank: the tasks the claim handed out",
    ("push_ready", "ZREMRANGEBYSCORE"): "lapsed tombstones: at most GONE_CAP (10,000) a pair",
    ("remove", "ZREMRANGEBYSCORE"): "lapsed tombstones: at most GONE_CAP (10,000) a pair",
    ("pair_sweep", "ZREMRANGEBYSCORE"): "lapsed tombstones: at most GONE_CAP (10,000) a pair",
    ("remove", "ZPOPMIN"): "the oldest tombstones past GONE_CAP: at most the call's ids",
    ("long_polls", "ZREMRANGEBYSCORE"): "reservations past their deadline: at most the cap",
    ("idem_abandon", "DEL"): "one idempotency record (a few fields)",
    ("ack_pass", "DEL"): "one committer's lock (a string)",
    ("task_finished", "RENAME"): "its destination UNLINKed first (freed off the main "
                                 "thread); the source is renamed, not copied",
}
CALL = re.compile(r"redis\.p?call\(\s*'([A-Za-z]+)'")


def redis_calls(text: str) -> list[tuple[str, list[str]]]:
    """(command, its arguments' source text) of each ``redis.call`` with a literal command
    name."""
    calls = []
    for match in CALL.finditer(text):
        depth, args, current, quote = 1, [], "", ""
        rest = text[match.end():]
        for i, char in enumerate(rest):
            if quote:  # inside a string literal: its brackets and commas are text
                if char == quote and rest[i - 1] != "\\":
                    quote = ""
            elif char in "'\"":
                quote = char
            elif char in "({[":
                depth += 1
            elif char in ")}]":
                depth -= 1
                if depth == 0:
                    break
            if char == "," and depth == 1 and not quote:
                args.append(current.strip())
                current = ""
            else:
                current += char
        args.append(current.strip())
        calls.append((match.group(1).upper(), [a for a in args if a]))
    return calls


def fixed_bounds(args: list[str]) -> bool:
    """Whether a rank range's two bounds (after its key) are literal numbers."""
    return len(args) > 2 and args[1].isdigit() and args[2].isdigit()


def whole_set_reads(name: str, text: str) -> list[str]:
    """What in one script reads a whole set, each as 'script: COMMAND args'."""
    found = []
    for command, args in redis_calls(text):
        words = {a.strip("'\"").upper() for a in args}
        if (name, command) in BOUNDED_BY_THEIR_GUARD:
            continue
        if command in WHOLE_SET | REMOVES_ANY \
                or (command in NEEDS_LIMIT and "LIMIT" not in words) \
                or (command in NEEDS_COUNT and "COUNT" not in words) \
                or (command in POPS and len(args) > 1) \
                or (command == "ZREMRANGEBYRANK" and not fixed_bounds(args)):
            found.append(f"{name}: {command} {', '.join(args)}")
        elif command in {"ZRANGE", "ZREVRANGE"}:
            by = {"BYSCORE", "BYLEX"} & words
            stop = args[2] if len(args) > 2 else ""
            if (by and "LIMIT" not in words) or \
                    (not by and not (stop.isdigit() and args[1].isdigit())):
                found.append(f"{name}: {command} {', '.join(args)}")
    return found


def test_no_script_reads_a_whole_lease_ready_or_data_set():
    """Every Lua source (scripts and shared pieces): a range read has a LIMIT or fixed
    bounds, a scan a COUNT, and none of the commands that read a whole key, or remove as much
    of it as it holds (a range by score, a pop of a count, a DEL), is called but where its
    guard bounds it (BOUNDED_BY_THEIR_GUARD). So a call's work does not grow with what a pair
    holds (a warm set of warm_max tasks, 50,000 by default)."""
    found = []
    for path in sorted(LUA.iterdir(), key=lambda p: p.name):
        if path.name.endswith(".lua"):
            found += whole_set_reads(path.name[:-4], path.read_text("utf-8"))
    assert found == []


def test_the_lint_finds_what_it_is_meant_to():
    assert whole_set_reads("x", "redis.call('ZRANGE', KEYS[1], 0, -1)") != []
    assert whole_set_reads("x", "redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')") == []
    assert whole_set_reads("x", "redis.call('HKEYS', KEYS[2])") != []
    assert whole_set_reads("x", "redis.call('ZRANGEBYSCORE', k, '-inf', now)") != []
    assert whole_set_reads(
        "x", "redis.call('ZRANGEBYSCORE', k, '-inf', now, 'LIMIT', 0, 10)") == []
    assert whole_set_reads("x", "redis.call('ZSCAN', k, cursor)") != []
    assert whole_set_reads("x", "redis.call('ZSCAN', k, cursor, 'COUNT', n)") == []
    assert whole_set_reads("x", "redis.call('HGETALL', string.format('%s', k))") != []
    assert whole_set_reads(
        "x", "redis.call('ZRANGEBYSCORE', k, '(' .. now, '+inf', 'LIMIT', 0, 1)") == []
    assert whole_set_reads("x", "redis.call('ZREMRANGEBYSCORE', k, '-inf', now)") != []
    assert whole_set_reads("x", "redis.call('ZREMRANGEBYRANK', k, 0, -1)") != []
    assert whole_set_reads("x", "redis.call('ZREMRANGEBYRANK', k, 0, n - 1)") != []
    assert whole_set_reads("x", "redis.call('ZREMRANGEBYRANK', k, 0, 9)") == []
    assert whole_set_reads("x", "redis.call('ZPOPMIN', k, n)") != []
    assert whole_set_reads("x", "redis.call('ZPOPMIN', k)") == []
    assert whole_set_reads("x", "redis.call('DEL', KEYS[1])") != []


def test_each_guarded_exception_is_still_there():
    """An exception nobody needs any more is taken off the list."""
    for (name, command) in BOUNDED_BY_THEIR_GUARD:
        text = LUA.joinpath(f"{name}.lua").read_text("utf-8")
        assert command in {c for c, _ in redis_calls(text)}, (name, command)


def test_a_script_is_read_and_registered_when_first_asked_for():
    """A warm tier registers a script by the first call that runs it (a claim runs three of
    the 36), as the whole set when iterated, and each once; the client is not called."""
    import hashlib

    import redis

    from tierq.dal.warm_tier import Scripts

    scripts = Scripts(redis.Redis(host="unused.invalid"))
    assert scripts._registered == {} and len(scripts) == len(SCRIPTS)
    first = scripts["push_ready"]
    assert first is scripts["push_ready"] and list(scripts._registered) == ["push_ready"]
    assert first.sha == hashlib.sha1(script_source("push_ready").encode()).hexdigest()
    assert "claim" in scripts and "no_such_script" not in scripts
    assert {name for name, _ in scripts.items()} == set(SCRIPTS)
    assert scripts._registered["push_ready"] is first


def test_the_share_counts_with_the_scripts_own_charges():
    """``WarmTier.pair_usage`` counts a tombstone, a ``newer`` entry and a completion marker
    as the scripts do (lua/warm_usage.lua, lua/newer_entries.lua, lua/task_finished.lua)."""
    usage = LUA.joinpath("warm_usage.lua").read_text("utf-8")
    newer = LUA.joinpath("newer_entries.lua").read_text("utf-8")
    finished = LUA.joinpath("task_finished.lua").read_text("utf-8")
    assert re.search(rf"^local GONE_CHARGE = {GONE_CHARGE}$", usage, re.M)
    assert re.search(rf"^local NEWER_CHARGE = {NEWER_CHARGE}$", newer, re.M)
    assert re.search(rf"^local MARKER_CHARGE = {MARKER_CHARGE}$", usage, re.M)
    assert re.search(rf"^local MARKER_OWN_FIELDS = {MARKER_OWN_FIELDS}$", usage, re.M)
    assert re.search(rf"^local MARKERS_KEPT_AT_LEAST = {MARKERS_KEPT_AT_LEAST}$", finished,
                     re.M)
