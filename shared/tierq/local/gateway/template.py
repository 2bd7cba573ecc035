"""What the local stack needs from template.yaml: the HTTP routes (each ``HttpApi`` event of
each function), the functions (code folder, handler, timeout, plain environment values) and
the schedules (``AWS::Scheduler::Schedule`` resources, and SAM ``Schedule``/``ScheduleV2``
events) with the function each one targets.

CloudFormation's short tags (``!Ref``, ``!Sub``, ``!GetAtt`` …) are read into their long
form (``{"Ref": …}``); a ``!Ref`` to a parameter resolves to the parameter's default, and
anything else that needs AWS to resolve is left out.
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
    def load(cls, path: Path) -> Template:
        return read_template(path)

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


def read_template(path: Path) -> Template:
    data = load_yaml(path)
    parameters = data.get("Parameters") or {}
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
