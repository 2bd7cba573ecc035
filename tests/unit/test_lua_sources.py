"""Warm-tier scripts are loaded with the shared pieces they include, once each."""

from __future__ import annotations

from importlib import resources

from tierq.dal.warm_tier import SCRIPTS, script_source

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

