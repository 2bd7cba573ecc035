"""No command over ElastiCache Serverless's 3,999 arguments, checked by the engine's own
client (tests/integration/command_limit_scenarios.py)."""

from __future__ import annotations

from tests.integration import command_limit_scenarios as scenarios


def test_the_engines_client_refuses_a_command_over_the_limit(tq, valkey):
    scenarios.client_refuses_long_commands(tq, valkey)


def test_calls_of_many_items_are_sent_in_parts_within_the_limit(make_tq, pg):
    scenarios.large_calls_stay_under_the_limit(make_tq, pg)
