"""template.yaml as the tests read it: CloudFormation's short tags loaded in their long
form, and the functions it declares (the checks of tests/template)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "template.yaml"

# logical id -> (code folder, tick env var or None)
FUNCTIONS: dict[str, tuple[str, str | None]] = {
    "EnqueueFunction": ("enqueue", None),
    "ClaimFunction": ("claim", None),
    "AckFunction": ("ack", None),
    "AdminFunction": ("admin", None),
    "ColdToWarmFunction": ("cold_to_warm", "TIERQ_COLD_TO_WARM_EVERY"),
    "DelayedMoverFunction": ("delayed_mover", "TIERQ_DELAYED_EVERY"),
    "ReaperFunction": ("reaper", "TIERQ_REAPER_EVERY"),
    "CronTickFunction": ("cron_tick", "TIERQ_CRON_EVERY"),
    "MigrateFunction": ("migrate", None),
}


class CfnLoader(yaml.SafeLoader):
    """SafeLoader that turns CloudFormation short tags into their long JSON form."""


def _cfn_tag(loader: CfnLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    if suffix == "Ref":
        return {"Ref": value}
    if suffix == "GetAtt" and isinstance(value, str):
        value = value.split(".", 1)
    if suffix == "Condition":
        return {"Condition": value}
    return {f"Fn::{suffix}": value}


CfnLoader.add_multi_constructor("!", _cfn_tag)
