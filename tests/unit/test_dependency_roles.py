"""Dependencies by role: the Lambda runtime imports nothing of the extras (and X-Ray only when
tracing is on); a part that needs an extra names it when its packages are missing.

Each case runs in a fresh interpreter of this environment in which the extras' packages are
made impossible to import, as if they were not installed."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = sorted(path.parent.name for path in (ROOT / "functions").glob("*/app.py"))

# Import names of the extras' packages (cli, client, local, aws) and of X-Ray.
EXTRAS_MODULES = ("typer", "click", "rich", "pygments", "httpx", "httpcore", "yaml", "boto3")

BLOCKER = """\
import sys
from importlib.abc import MetaPathFinder

class NotInstalled(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
"""


def run_without(blocked: tuple[str, ...], code: str, *, cwd: Path = ROOT,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean_env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{cwd}:{ROOT / 'shared'}",
                 "AWS_REGION": "us-east-1", **(env or {})}
    return subprocess.run([sys.executable, "-c", BLOCKER.format(blocked=blocked) + code],
                          cwd=cwd, env=clean_env, capture_output=True, text=True, timeout=120,
                          check=False)


def loaded(names: tuple[str, ...]) -> str:
    return f"print(sorted(m for m in {names!r} if m in sys.modules))"


@pytest.mark.parametrize("function", FUNCTIONS)
def test_every_function_imports_without_the_extras_and_without_xray_when_tracing_is_off(
        function: str) -> None:
    done = run_without(
        (*EXTRAS_MODULES, "aws_xray_sdk"),
        "import app\n" + loaded(("aws_xray_sdk", "botocore.session", "botocore.client")),
        cwd=ROOT / "functions" / function,
        env={"LAMBDA_TASK_ROOT": str(ROOT / "functions" / function),
             "POWERTOOLS_TRACE_DISABLED": "true"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"


def test_with_tracing_on_in_lambda_the_powertools_tracer_and_xray_are_loaded() -> None:
    function = ROOT / "functions" / "claim"
    done = run_without(
        EXTRAS_MODULES,
        "import app\nfrom tierq.aws.runtime import tracer\nprint(type(tracer).__name__)\n"
        + loaded(("aws_xray_sdk",)),
        cwd=function, env={"LAMBDA_TASK_ROOT": str(function)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["Tracer", "['aws_xray_sdk']"]


@pytest.mark.parametrize(("environ", "enabled"), [
    ({"LAMBDA_TASK_ROOT": "/var/task"}, True),
    ({"LAMBDA_TASK_ROOT": "/var/task", "POWERTOOLS_TRACE_DISABLED": "false"}, True),
    ({"LAMBDA_TASK_ROOT": "/var/task", "POWERTOOLS_TRACE_DISABLED": "true"}, False),
    ({"LAMBDA_TASK_ROOT": "/var/task", "POWERTOOLS_TRACE_DISABLED": "1"}, False),
    ({"LAMBDA_TASK_ROOT": "/var/task", "POWERTOOLS_TRACE_DISABLED": "Yes"}, False),
    ({"LAMBDA_TASK_ROOT": "/var/task", "POWERTOOLS_TRACE_DISABLED": "off"}, True),
    ({"LAMBDA_TASK_ROOT": "/var/task", "AWS_SAM_LOCAL": "true"}, False),
    ({}, False),
])
def test_tracing_follows_the_powertools_rule(environ: dict[str, str], enabled: bool) -> None:
    from tierq.aws.runtime import tracing_enabled
    from tierq.config import Settings

    assert tracing_enabled(Settings.from_environ(environ)) is enabled


def test_the_untraced_tracer_leaves_handlers_as_they_are() -> None:
    from tierq.aws.runtime import UntracedTracer

    def handler(event: dict[str, int], context: object) -> int:
        return event["n"]

    tracer = UntracedTracer("tierq")
    assert tracer.capture_lambda_handler(handler) is handler
    assert tracer.capture_lambda_handler(capture_response=False)(handler) is handler
    assert tracer.capture_method(handler) is handler


@pytest.mark.parametrize(("module", "missing", "extra"), [
    ("tierq.cli", "typer", "cli"),
    ("tierq.cli", "rich", "cli"),
    ("tierq.client", "httpx", "client"),
    ("tierq.client.worker", "httpx", "client"),
    ("tierq.local.gateway", "yaml", "local"),
    ("tierq.local.demo", "rich", "local"),
])
def test_a_part_without_its_extra_names_the_extra_to_install(
        module: str, missing: str, extra: str) -> None:
    done = run_without((missing,), f"import {module}")
    assert done.returncode != 0
    last_line = done.stderr.strip().splitlines()[-1]
    assert last_line.startswith("tierq.extras.MissingExtraError: "), done.stderr[-2000:]
    assert f"needs the module {missing!r}" in last_line
    assert f"pip install 'tierq[{extra}]'" in last_line


def test_the_tierq_command_without_the_cli_extra_says_what_to_install() -> None:
    done = run_without(("typer",), "from tierq.console import main\nmain()")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "tierq: the tierq command (tierq.cli) needs the module 'typer', which tierq installs "
        "with its 'cli' extra: pip install 'tierq[cli]'")


def test_sigv4_signing_and_secrets_without_the_aws_extra_name_it() -> None:
    done = run_without(("botocore", "boto3"), """
from tierq.client import SigV4Auth
from tierq.dal.connect import fetch_secret
from tierq.extras import MissingExtraError
for attempt in (lambda: SigV4Auth(region="us-east-1"),
                lambda: fetch_secret("arn:aws:secretsmanager:us-east-1:1:secret:x")):
    try:
        attempt()
    except MissingExtraError as error:
        print(error.extra, error.name)
""")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["aws", "botocore", "aws", "boto3"]


def test_the_core_dependencies_are_the_lambda_runtimes_only() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    core = {requirement.split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower()
            for requirement in pyproject["project"]["dependencies"]}
    assert core == {"psycopg", "psycopg-pool", "orjson", "redis", "hiredis", "pydantic",
                    "aws-lambda-powertools", "croniter", "tzdata"}
    extras = pyproject["project"]["optional-dependencies"]
    assert {"cli", "client", "local", "aws"} <= set(extras)
    assert not any("typer" in requirement and "<" in requirement
                   for requirement in extras["cli"]), "typer is not capped"
