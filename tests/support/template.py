"""template.yaml as the tests read it: CloudFormation's short tags loaded in their long
form, Fn::ForEach expanded for the parameters' values as the AWS::LanguageExtensions
transform does, and the functions it declares (the checks of tests/template)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from tierq.maintenance.registry import jobs

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "template.yaml"


def logical_id(folder: str) -> str:
    """The template's logical id of the function in ``functions/<folder>/``."""
    return "".join(word.capitalize() for word in folder.split("_")) + "Function"


# logical id -> (code folder, tick env var or None); one scheduled function per maintenance
# job of the registry, in its job's folder, with its tick interval's variable
FUNCTIONS: dict[str, tuple[str, str | None]] = {
    "EnqueueFunction": ("enqueue", None),
    "ClaimFunction": ("claim", None),
    "AckFunction": ("ack", None),
    "AdminFunction": ("admin", None),
    **{logical_id(job.name): (job.name, job.schedule_env) for job in jobs().values()},
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


def load_template(values: Mapping[str, str] | None = None, path: Path = TEMPLATE
                  ) -> dict[str, Any]:
    """The template after the ``AWS::LanguageExtensions`` transform (every ``Fn::ForEach``
    expanded) for the parameter ``values`` (the others at their defaults)."""
    from tierq.local.gateway.template import expand_language_extensions

    return expand_language_extensions(yaml.load(path.read_text(), Loader=CfnLoader), values)
