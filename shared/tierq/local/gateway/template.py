"""What the local stack needs from template.yaml: the HTTP routes (each ``HttpApi`` event of
each function), the functions (code folder, handler, timeout, plain environment values) and
the schedules (``AWS::Scheduler::Schedule`` resources, and SAM ``Schedule``/``ScheduleV2``
events) with the function each one targets.

CloudFormation's short tags (``!Ref``, ``!Sub``, ``!GetAtt`` …) are read into their long
form (``{"Ref": …}``); a ``!Ref`` to a parameter resolves to the parameter's default (or the
value given for it), and anything else that needs AWS to resolve is left out.

The ``AWS::LanguageExtensions`` transform's ``Fn::ForEach`` is expanded first, as
CloudFormation does before the other transforms (:func:`expand_language_extensions`): each
loop's collection is resolved from the parameters and conditions (``Ref``, ``Fn::If``,
``Fn::Join``, ``Fn::Split``, ``Fn::Select``, ``Fn::Equals``, ``Fn::Not``, ``Fn::And``,
``Fn::Or``), and ``${Identifier}``, ``&{Identifier}`` (non-alphanumerics dropped) and
``{"Ref": Identifier}`` are replaced in its body, keys and values.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierq.extras import MissingExtraError

try:
    import yaml
except ModuleNotFoundError as error:
    raise MissingExtraError.from_error(
        error, "local", "the local gateway (tierq.local.gateway)") from error

DEFAULT_TIMEOUT_SECONDS = 3  # Lambda's default
DEFAULT_PERIOD_SECONDS = 60.0
_RATE = re.compile(r"^rate\(\s*(\d+)\s+(minute|minutes|hour|hours|day|days)\s*\)$")
_UNIT_SECONDS = {"minute": 60, "minutes": 60, "hour": 3600, "hours": 3600, "day": 86400,
                 "days": 86400}


FOR_EACH = "Fn::ForEach::"
MAX_FOR_EACH_DEPTH = 5  # CloudFormation's limit of nested loops
LANGUAGE_EXTENSION_SECTIONS = ("Conditions", "Resources", "Outputs")


class TemplateError(ValueError):
    """template.yaml lacks something the local stack needs."""


class CloudFormationLoader(yaml.SafeLoader):
    """A YAML loader that reads CloudFormation's short-form tags."""


def _construct_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    name = "Ref" if suffix == "Ref" else "Condition" if suffix == "Condition" else f"Fn::{suffix}"
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
        if suffix == "GetAtt" and isinstance(value, str):
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    elif isinstance(node, yaml.MappingNode):
        value = loader.construct_mapping(node, deep=True)
    else:  # YAML has no fourth kind of node
        raise yaml.constructor.ConstructorError(None, None, f"!{suffix} on {node.tag}",
                                                node.start_mark)
    return {name: value}


CloudFormationLoader.add_multi_constructor("!", _construct_tag)


def load_yaml(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as handle:
        data = yaml.load(handle, Loader=CloudFormationLoader)
    if not isinstance(data, dict):
        raise TemplateError(f"{path} is not a CloudFormation template (no mapping at the top)")
    return data


@dataclass(frozen=True)
class HttpRoute:
    method: str  # upper case, or ANY
    path: str  # as in the template: /v1/queues/{queue}/tasks
    function: str  # logical id
    public: bool  # Auth: {Authorizer: NONE}

    @property
    def route_key(self) -> str:
        return f"{self.method} {self.path}"

    @property
    def pattern(self) -> re.Pattern[str]:
        parts = []
        for segment in self.path.strip("/").split("/"):
            match = re.fullmatch(r"\{([A-Za-z0-9_]+)(\+?)\}", segment)
            if match and match[2]:
                parts.append(f"(?P<{match[1]}>.+)")
            elif match:
                parts.append(f"(?P<{match[1]}>[^/]+)")
            else:
                parts.append(re.escape(segment))
        return re.compile("^/" + "/".join(parts) + "$")

    def match(self, raw_path: str) -> dict[str, str] | None:
        found = self.pattern.match(raw_path)
        return None if found is None else found.groupdict()


@dataclass(frozen=True)
class FunctionSpec:
    logical_id: str
    code_uri: str
    handler: str
    timeout: int
    memory: int
    environment: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The folder name (``functions/enqueue/`` → ``enqueue``)."""
        return Path(self.code_uri.rstrip("/")).name


@dataclass(frozen=True)
class ScheduleSpec:
    name: str
    function: str  # logical id
    expression: str
    payload: Mapping[str, Any]
    period_seconds: float
    exact: bool  # False when the expression is not rate(...) and a minute is assumed


@dataclass
class Template:
    path: Path
    parameters: Mapping[str, Any]
    functions: dict[str, FunctionSpec]
    routes: list[HttpRoute]
    schedules: list[ScheduleSpec]

    @classmethod
    def load(cls, path: Path, values: Mapping[str, str] | None = None) -> Template:
        """``values``: parameter values in place of their defaults."""
        return read_template(path, values)

    def routes_of(self, function: str) -> list[HttpRoute]:
        return [r for r in self.routes if r.function == function]


def period_of(expression: str) -> tuple[float, bool]:
    """Seconds between runs of a schedule expression; (60, False) for what is not rate()."""
    match = _RATE.match(expression.strip())
    if match is None:
        return DEFAULT_PERIOD_SECONDS, False
    return float(int(match[1]) * _UNIT_SECONDS[match[2]]), True


class _Resolver:
    def __init__(self, parameters: Mapping[str, Any]) -> None:
        self.parameters = parameters

    def value(self, value: Any) -> Any:
        """A plain value, or None when resolving it needs AWS."""
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, str | int | float):
            return value
        if isinstance(value, dict) and set(value) == {"Ref"}:
            parameter = self.parameters.get(value["Ref"])
            if isinstance(parameter, dict) and "Default" in parameter:
                return self.value(parameter["Default"])
        return None

    def text(self, value: Any) -> str | None:
        resolved = self.value(value)
        return None if resolved is None else str(resolved)


def _function_name_of_target(arn: Any) -> str | None:
    if isinstance(arn, dict) and "Fn::GetAtt" in arn:
        target = arn["Fn::GetAtt"]
        if isinstance(target, list) and len(target) == 2 and target[1] == "Arn":
            return str(target[0])
    if isinstance(arn, dict) and "Ref" in arn:
        return str(arn["Ref"])
    return None


def _payload(raw: Any, resolver: _Resolver, default: Mapping[str, Any]) -> Mapping[str, Any]:
    text = resolver.text(raw) if raw is not None else None
    if text is None:
        return dict(default)
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TemplateError(f"a schedule's Input is not JSON: {text!r}") from exc
    return parsed if isinstance(parsed, dict) else {"input": parsed}


SCHEDULED_EVENT = {
    "version": "0",
    "detail-type": "Scheduled Event",
    "source": "aws.events",
    "account": "123456789012",
    "region": "us-east-1",
    "resources": [],
    "detail": {},
}


class _Unresolved(Exception):
    """A value that needs AWS (or more than the parameters) to resolve."""


class _Evaluator:
    """The values of intrinsic functions that the parameters alone decide (what a loop's
    collection and the conditions it uses need)."""

    def __init__(self, parameters: Mapping[str, Any], conditions: Mapping[str, Any]) -> None:
        self.parameters = parameters
        self.conditions = conditions
        self._decided: dict[str, bool] = {}
        self._deciding: set[str] = set()

    def value(self, node: Any) -> Any:
        if isinstance(node, bool | int | float | str):
            return node
        if isinstance(node, list):
            return [self.value(item) for item in node]
        if not isinstance(node, dict) or len(node) != 1:
            raise _Unresolved(node)
        [(function, argument)] = node.items()
        if function == "Ref":
            return self._parameter(argument)
        if function == "Condition":
            return self.condition(argument)
        if function == "Fn::If" and isinstance(argument, list) and len(argument) == 3:
            return self.value(argument[1] if self.condition(argument[0]) else argument[2])
        if function == "Fn::Join" and isinstance(argument, list) and len(argument) == 2:
            items = self.value(argument[1])
            if not isinstance(items, list):
                raise _Unresolved(node)
            return str(self.value(argument[0])).join(str(item) for item in items)
        if function == "Fn::Split" and isinstance(argument, list) and len(argument) == 2:
            return str(self.value(argument[1])).split(str(self.value(argument[0])))
        if function == "Fn::Select" and isinstance(argument, list) and len(argument) == 2:
            items = self.value(argument[1])
            if not isinstance(items, list):
                raise _Unresolved(node)
            return items[int(self.value(argument[0]))]
        if function == "Fn::Equals" and isinstance(argument, list) and len(argument) == 2:
            return str(self.value(argument[0])) == str(self.value(argument[1]))
        if function == "Fn::Not" and isinstance(argument, list) and len(argument) == 1:
            return not self.condition(argument[0])
        if function in ("Fn::And", "Fn::Or") and isinstance(argument, list):
            decided = [self.condition(item) for item in argument]
            return all(decided) if function == "Fn::And" else any(decided)
        raise _Unresolved(node)

    def condition(self, node: Any) -> bool:
        """A condition by name, or a condition function."""
        if not isinstance(node, str):
            return bool(self.value(node))
        if node in self._decided:
            return self._decided[node]
        if node not in self.conditions or node in self._deciding:
            raise _Unresolved(node)
        self._deciding.add(node)
        try:
            decided = self._decided[node] = bool(self.value(self.conditions[node]))
        finally:
            self._deciding.discard(node)
        return decided

    def _parameter(self, name: Any) -> Any:
        spec = self.parameters.get(name) if isinstance(name, str) else None
        if not isinstance(spec, dict) or "Default" not in spec:
            raise _Unresolved(name)  # a pseudo parameter, or one without a value here
        value = spec["Default"]
        kind = str(spec.get("Type", "String"))
        if kind == "CommaDelimitedList" or kind.startswith("List<"):
            return [item.strip() for item in str(value).split(",")]
        return "true" if value is True else "false" if value is False else value


def _substitute(node: Any, identifier: str, value: str) -> Any:
    """``node`` with the loop's ``${identifier}``, ``&{identifier}`` and
    ``{"Ref": identifier}`` replaced by ``value`` (in keys and values)."""
    if isinstance(node, str):
        return (node.replace(f"${{{identifier}}}", value)
                .replace(f"&{{{identifier}}}", re.sub(r"[^A-Za-z0-9]", "", value)))
    if isinstance(node, list):
        return [_substitute(item, identifier, value) for item in node]
    if isinstance(node, dict):
        if node == {"Ref": identifier}:
            return value
        return {_substitute(key, identifier, value): _substitute(item, identifier, value)
                for key, item in node.items()}
    return node


def _expand(node: Any, evaluator: _Evaluator, depth: int = 0) -> Any:
    if isinstance(node, list):
        return [_expand(item, evaluator, depth) for item in node]
    if not isinstance(node, dict):
        return node
    expanded: dict[Any, Any] = {}
    for key, value in node.items():
        generated = (_for_each(key, value, evaluator, depth)
                     if isinstance(key, str) and key.startswith(FOR_EACH)
                     else {key: _expand(value, evaluator, depth)})
        for new_key, new_value in generated.items():
            if new_key in expanded:
                raise TemplateError(f"{key}: {new_key!r} is generated twice, or already "
                                    "declared")
            expanded[new_key] = new_value
    return expanded


def _for_each(key: str, loop: Any, evaluator: _Evaluator, depth: int) -> dict[Any, Any]:
    if depth >= MAX_FOR_EACH_DEPTH:
        raise TemplateError(f"{key}: more than {MAX_FOR_EACH_DEPTH} nested Fn::ForEach")
    if (not isinstance(loop, list) or len(loop) != 3 or not isinstance(loop[0], str)
            or not loop[0] or not isinstance(loop[2], dict)):
        raise TemplateError(f"{key}: expected [identifier, collection, fragment]")
    identifier, collection, fragment = loop
    try:
        items = evaluator.value(collection)
    except _Unresolved as exc:
        raise TemplateError(f"{key}: its collection cannot be resolved from the parameters "
                            f"({exc.args[0]!r})") from exc
    if not isinstance(items, list):
        raise TemplateError(f"{key}: its collection is not a list")
    generated: dict[Any, Any] = {}
    for item in items:
        if isinstance(item, dict | list) or item is None:
            raise TemplateError(f"{key}: collection item {item!r} is not a string")
        text = "true" if item is True else "false" if item is False else str(item)
        for new_key, new_value in _expand(_substitute(fragment, identifier, text), evaluator,
                                          depth + 1).items():
            if new_key in generated:
                raise TemplateError(f"{key}: {new_key!r} is generated twice")
            generated[new_key] = new_value
    return generated


def with_values(parameters: Mapping[str, Any],
                values: Mapping[str, str] | None) -> dict[str, Any]:
    """The template's parameters with ``values`` in place of their defaults."""
    merged = dict(parameters)
    for name, value in (values or {}).items():
        spec = merged.get(name)
        if not isinstance(spec, dict):
            raise TemplateError(f"the template has no parameter {name!r}")
        merged[name] = {**spec, "Default": value}
    return merged


def expand_language_extensions(data: Mapping[str, Any],
                               values: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The template with every ``Fn::ForEach`` of its conditions, resources (properties
    included) and outputs expanded for the parameters (``values``, else their defaults), as
    the ``AWS::LanguageExtensions`` transform does."""
    expanded = dict(data)
    parameters = with_values(data.get("Parameters") or {}, values)
    conditions = data.get("Conditions") or {}
    evaluator = _Evaluator(parameters, conditions)
    for section in LANGUAGE_EXTENSION_SECTIONS:
        if isinstance(data.get(section), dict):
            expanded[section] = _expand(data[section], evaluator)
            if section == "Conditions":  # (loops may use generated conditions)
                evaluator.conditions = expanded[section]
    return expanded


def read_template(path: Path, values: Mapping[str, str] | None = None) -> Template:
    """The local stack's view of the template at ``path`` for the parameter ``values``
    given (the others at their defaults)."""
    data = expand_language_extensions(load_yaml(path), values)
    parameters = with_values(data.get("Parameters") or {}, values)
    resolver = _Resolver(parameters)
    globals_fn = (data.get("Globals") or {}).get("Function") or {}
    resources = data.get("Resources") or {}
    functions: dict[str, FunctionSpec] = {}
    routes: list[HttpRoute] = []
    schedules: list[ScheduleSpec] = []

    for logical_id, resource in resources.items():
        if not isinstance(resource, dict) or resource.get("Type") != "AWS::Serverless::Function":
            continue
        props = resource.get("Properties") or {}
        code_uri = resolver.text(props.get("CodeUri"))
        handler = resolver.text(props.get("Handler", globals_fn.get("Handler")))
        if code_uri is None or handler is None:
            continue  # inline code or an S3 location: nothing to run locally
        environment: dict[str, str] = {}
        for source in (globals_fn, props):
            variables = ((source.get("Environment") or {}).get("Variables")) or {}
            for name, raw in variables.items():
                text = resolver.text(raw)
                if text is not None:
                    environment[name] = text
                else:
                    environment.pop(name, None)
        timeout = resolver.value(props.get("Timeout", globals_fn.get("Timeout")))
        memory = resolver.value(props.get("MemorySize", globals_fn.get("MemorySize")))
        functions[logical_id] = FunctionSpec(
            logical_id=logical_id, code_uri=code_uri, handler=handler,
            timeout=int(float(timeout)) if timeout is not None else DEFAULT_TIMEOUT_SECONDS,
            memory=int(float(memory)) if memory is not None else 128,
            environment=environment,
        )
        for event_id, event in (props.get("Events") or {}).items():
            if not isinstance(event, dict):
                continue
            kind = event.get("Type")
            eprops = event.get("Properties") or {}
            if kind == "HttpApi":
                method = str(resolver.text(eprops.get("Method")) or "ANY").upper()
                route_path = resolver.text(eprops.get("Path"))
                if route_path is None:
                    continue
                auth = eprops.get("Auth") or {}
                routes.append(HttpRoute(method=method, path=route_path, function=logical_id,
                                        public=auth.get("Authorizer") == "NONE"))
            elif kind in ("Schedule", "ScheduleV2"):
                expression = resolver.text(eprops.get("Schedule")
                                           or eprops.get("ScheduleExpression"))
                if expression is None:
                    continue
                period, exact = period_of(expression)
                schedules.append(ScheduleSpec(
                    name=f"{logical_id}.{event_id}", function=logical_id, expression=expression,
                    payload=_payload(eprops.get("Input"), resolver,
                                     {} if kind == "ScheduleV2" else SCHEDULED_EVENT),
                    period_seconds=period, exact=exact,
                ))

    for logical_id, resource in resources.items():
        if not isinstance(resource, dict) or resource.get("Type") != "AWS::Scheduler::Schedule":
            continue
        props = resource.get("Properties") or {}
        target = props.get("Target") or {}
        function = _function_name_of_target(target.get("Arn"))
        expression = resolver.text(props.get("ScheduleExpression"))
        if function is None or function not in functions or expression is None:
            continue
        period, exact = period_of(expression)
        schedules.append(ScheduleSpec(
            name=logical_id, function=function, expression=expression,
            payload=_payload(target.get("Input"), resolver, {}),
            period_seconds=period, exact=exact,
        ))

    for route in routes:
        if route.function not in functions:
            raise TemplateError(f"route {route.route_key} targets {route.function}, which has "
                                "no local code (CodeUri)")
    return Template(path=path, parameters=parameters, functions=functions, routes=routes,
                    schedules=schedules)
