"""The alarm on the one limit left on places in line (docs/architecture.md §2): each shard's
tierq_task_seq, reported by the reaper's gauge round as TaskSeqUsedPercent
(tests/handlers/test_aws.py feeds it through EMF), alarms well before its end."""

from __future__ import annotations

from typing import Any

import yaml

from tests.support.template import TEMPLATE, CfnLoader
from tierq.core.ordering import SEQ_MAX, SEQ_STEP

YEAR = 365.25 * 24 * 3600
WORST_CASE = 100_000  # ready transitions a second, each its own statement (one value)


def test_the_task_sequence_alarm_comes_a_century_or_more_before_its_end() -> None:
    template: dict[str, Any] = yaml.load(TEMPLATE.read_text(), Loader=CfnLoader)
    props = template["Resources"]["TaskSeqAlarm"]["Properties"]
    [query] = props["Metrics"]
    assert query["Expression"] == "SELECT MAX(TaskSeqUsedPercent) FROM Tierq GROUP BY shard"
    assert query["ReturnData"] is True
    assert props["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert props["AlarmActions"] == [{"Ref": "AlarmTopic"}]
    assert props["TreatMissingData"] == "notBreaching"
    left_when_it_fires = SEQ_MAX * (100 - props["Threshold"]) / 100
    assert left_when_it_fires / SEQ_STEP / WORST_CASE / YEAR > 1000
