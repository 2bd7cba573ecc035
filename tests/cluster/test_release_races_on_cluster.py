"""An ack (or a nack) and a release of one lease at once on a three-master cluster: the
task runs once (tests/integration/release_race_scenarios.py)."""

from __future__ import annotations

import pytest

from tests.integration import release_race_scenarios as races


@pytest.mark.parametrize("race", sorted(races.RACES))
def test_an_outcome_and_a_release_of_one_lease_never_both_happen(make_tq, monkeypatch, race):
    races.RACES[race](make_tq, monkeypatch)
