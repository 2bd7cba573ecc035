"""Warm-tier scripts are loaded with the shared pieces they include, once each."""

from __future__ import annotations

from importlib import resources

from tierq.dal.warm_tier import SCRIPTS, script_source

LUA = resources.files("tierq.dal").joinpath("lua")


def test_an_included_piece_comes_first_and_once():
    text = script_source("claim")
    body = LUA.joinpath("claim.lua").read_text("utf-8")
    assert text.endswith(body)
    assert text.count("local function call_chunked") == 1
    assert "local function call_chunked" in text[: len(text) - len(body)]


def test_a_script_without_includes_is_loaded_as_written():
    assert script_source("admission_end") == LUA.joinpath("admission_end.lua").read_text("utf-8")


def test_every_script_that_calls_a_shared_piece_includes_it():
    for name in SCRIPTS:
        body = LUA.joinpath(f"{name}.lua").read_text("utf-8")
        if "call_chunked(" in body:
            assert "-- include: call_chunked" in body, name
