"""The local gateway's template reader and Fn::ForEach (the AWS::LanguageExtensions
transform): loops expanded for the parameters' values as CloudFormation does before the other
transforms, so that `tierq dev` runs template.yaml, whatever shards it is given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tierq.local.gateway.stack import GatewayStackError, shard_values
from tierq.local.gateway.template import (
    Template,
    TemplateError,
    expand_language_extensions,
    load_yaml,
)

REPO = Path(__file__).resolve().parents[2]

LOOPS = """
Transform: [AWS::LanguageExtensions]
Parameters:
  Names: {Type: CommaDelimitedList, Default: "a,b-2"}
  More: {Type: CommaDelimitedList, Default: ""}
Conditions:
  HasMore: !Not [!Equals [!Join ["", !Ref More], ""]]
  Fn::ForEach::Flags:
    - N
    - !Ref Names
    - Is&{N}: !Equals [!Ref N, a]
Resources:
  Fn::ForEach::Queues:
    - N
    - !Ref Names
    - Queue&{N}:
        Type: AWS::SQS::Queue
        Condition: Is&{N}
        Properties:
          QueueName: !Sub "${AWS::StackName}-${N}"
          Tags:
            - {Key: shard, Value: !Ref N}
          Fn::ForEach::Props:
            - P
            - [DelaySeconds, MaximumMessageSize]
            - ${P}: !Ref N
  Fn::ForEach::Extra:
    - M
    - !If [HasMore, !Ref More, []]
    - Topic${M}:
        Type: AWS::SNS::Topic
Outputs:
  Fn::ForEach::Out:
    - N
    - !Ref Names
    - Url&{N}:
        Value: !GetAtt [!Sub "Queue&{N}", QueueUrl]
"""


def expand(text: str, values: dict[str, str] | None = None) -> dict[str, Any]:
    return expand_language_extensions(load(text), values)


def load(text: str) -> dict[str, Any]:
    from tierq.local.gateway.template import CloudFormationLoader

    data: dict[str, Any] = yaml.load(text, Loader=CloudFormationLoader)
    return data


def test_loops_expand_keys_values_and_refs_of_the_identifier() -> None:
    data = expand(LOOPS)
    assert list(data["Resources"]) == ["Queuea", "Queueb2"]
    queue = data["Resources"]["Queueb2"]
    assert queue["Condition"] == "Isb2"
    assert queue["Properties"] == {
        "QueueName": {"Fn::Sub": "${AWS::StackName}-b-2"},
        "Tags": [{"Key": "shard", "Value": "b-2"}],
        "DelaySeconds": "b-2", "MaximumMessageSize": "b-2"}  # a loop in the properties
    assert data["Conditions"]["Isb2"] == {"Fn::Equals": ["b-2", "a"]}
    assert data["Outputs"] == {
        f"Url{n}": {"Value": {"Fn::GetAtt": [{"Fn::Sub": f"Queue{n}"}, "QueueUrl"]}}
        for n in ("a", "b2")}
    assert "Fn::ForEach::Extra" not in data["Resources"]  # an empty collection: nothing


def test_a_collection_follows_the_values_given_and_the_conditions() -> None:
    data = expand(LOOPS, {"More": "x,y", "Names": "c"})
    assert list(data["Resources"]) == ["Queuec", "Topicx", "Topicy"]
    with pytest.raises(TemplateError, match="no parameter 'Nope'"):
        expand(LOOPS, {"Nope": "1"})


@pytest.mark.parametrize(("collection", "says"), [
    ("[a, a]", "generated twice"),
    ("!GetAtt [Thing, List]", "cannot be resolved"),
    ("!Ref AWS::NotificationARNs", "cannot be resolved"),
    ("!Join [',', [a, b]]", "not a list"),
])
def test_bad_loops_are_refused_by_name(collection: str, says: str) -> None:
    text = f"""
Resources:
  Fn::ForEach::Things:
    - N
    - {collection}
    - Thing${{N}}: {{Type: AWS::SNS::Topic}}
"""
    with pytest.raises(TemplateError, match=f"Fn::ForEach::Things: .*{says}"):
        expand(text)


def test_a_generated_key_may_not_replace_a_declared_one_nor_nest_too_deep() -> None:
    with pytest.raises(TemplateError, match="generated twice, or already declared"):
        expand("""
Resources:
  Topica: {Type: AWS::SNS::Topic}
  Fn::ForEach::T: [N, [a], {"Topic${N}": {Type: AWS::SNS::Topic}}]
""")
    fragment: dict[str, Any] = {"X${L5}": {"Type": "AWS::SNS::Topic"}}
    for depth in range(5, -1, -1):
        fragment = {f"Fn::ForEach::L{depth}": [f"L{depth}", ["a"], fragment]}
    with pytest.raises(TemplateError, match="more than 5 nested"):
        expand_language_extensions({"Resources": fragment})


def test_the_local_stack_reads_template_yaml_for_any_shards(tmp_path: Path) -> None:
    path = REPO / "template.yaml"
    assert "Fn::ForEach::ExtraShards" in load_yaml(path)["Resources"]
    one = Template.load(path)
    three = Template.load(path, {"DefaultShardName": "a", "ExtraShardNames": "b,c"})
    # further shards are nested stacks, which run nothing locally: the same functions
    assert {f.name for f in one.functions.values()} == {f.name for f in three.functions.values()}
    assert [r.route_key for r in one.routes] == [r.route_key for r in three.routes]
    assert [s.name for s in one.schedules] == [s.name for s in three.schedules]
    assert one.functions["MigrateFunction"].timeout == 300


def test_the_local_stack_expands_the_template_for_the_shards_it_is_given() -> None:
    assert shard_values({}) == {}
    assert shard_values({"TIERQ_SHARD_URLS": "main=postgresql://h/a, postgresql://h/tierq_b,"
                                             "c=postgresql://h/c"}) == {
        "DefaultShardName": "main", "ExtraShardNames": "tierq-b,c"}
    data = expand_language_extensions(
        load_yaml(REPO / "template.yaml"),
        shard_values({"TIERQ_SHARD_URLS": "default=postgresql://h/a,b=postgresql://h/b"}))
    assert [k for k in data["Resources"] if k.startswith("DbShard")] == ["DbShardb"]


def test_a_malformed_shard_list_is_a_stack_error_naming_the_item() -> None:
    with pytest.raises(GatewayStackError, match="item 2"):
        shard_values({"TIERQ_SHARD_URLS": "a=postgresql://h/a,,"})
