"""Every setting of the engine and ``tierq.aws`` is read through ``tierq.config.Settings``.

A module that reads ``os.environ`` itself escapes the model's validation and the README's
table of variables; this test reads every module under ``shared/tierq`` (its syntax tree,
not its text) and fails on any read of the environment outside the documented places:

| where                                                    | why                                  |
| -------------------------------------------------------- | ------------------------------------ |
| ``tierq/config.py``                                      | the model itself                     |
| ``tierq.maintenance.registry`` ``MaintenanceJob.configure`` | the jobs' ``TIERQ_<JOB>_<FIELD>`` |
| ``tierq.dal.connect`` ``use_system_trust_store``         | OpenSSL's own ``SSL_CERT_FILE``      |
| ``tierq/client/``, ``tierq/cli/``, ``tierq/local/``      | the client, the command line and the |
|                                                          | local stack keep their own variables |
| ``tierq/dal/schema_snapshot.py``                         | a developer's tool (``--server``)    |
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tierq.config import Settings

PACKAGE = Path(__file__).resolve().parents[2] / "shared" / "tierq"
OWN_VARIABLES = ("client/", "cli/", "local/")  # packages that keep their own variables
ALLOWED = {
    ("config.py", None),  # the whole module
    ("dal/schema_snapshot.py", None),
    ("maintenance/registry.py", "configure"),
    ("dal/connect.py", "use_system_trust_store"),
}
READERS = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def environment_reads(source: str) -> Iterator[tuple[int, str | None, str]]:
    """(line, enclosing function or None, what) of each use of the process environment in
    ``source``: ``os.environ``, ``os.getenv`` (under any name ``os`` is imported as) and
    those names imported from ``os``."""
    tree = ast.parse(source)
    os_names = {"os"}
    direct: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            os_names |= {a.asname or a.name for a in node.names if a.name == "os"}
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            direct |= {a.asname or a.name for a in node.names if a.name in READERS}

    def visit(node: ast.AST, function: str | None) -> Iterator[tuple[int, str | None, str]]:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        if isinstance(node, ast.Attribute) and node.attr in READERS \
                and isinstance(node.value, ast.Name) and node.value.id in os_names:
            yield node.lineno, function, f"{node.value.id}.{node.attr}"
        elif isinstance(node, ast.Name) and node.id in direct:
            yield node.lineno, function, node.id
        elif isinstance(node, ast.ImportFrom) and node.module == "os" and any(
                a.name in READERS for a in node.names):
            yield node.lineno, function, "from os import ..."
        for child in ast.iter_child_nodes(node):
            yield from visit(child, function)

    yield from visit(tree, None)


def modules() -> Iterator[tuple[str, str]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), path.read_text()


def test_no_module_reads_the_environment_outside_the_documented_places() -> None:
    found = []
    for name, source in modules():
        if name.startswith(OWN_VARIABLES) or (name, None) in ALLOWED:
            continue
        for line, function, what in environment_reads(source):
            if (name, function) not in ALLOWED:
                found.append(f"tierq/{name}:{line} ({function or 'module'}): {what}")
    assert found == [], "read these through tierq.config.Settings:\n" + "\n".join(found)


def test_every_documented_exception_still_reads_the_environment() -> None:
    # (an exception nobody needs any more would let a new read through unnoticed)
    sources = dict(modules())
    for name, function in ALLOWED:
        reads = [f for _, f, _ in environment_reads(sources[name])]
        assert reads, f"tierq/{name} reads no environment: drop it from ALLOWED"
        if function is not None:
            assert function in reads, f"tierq/{name}: {function} reads no environment"


@pytest.mark.parametrize(("source", "expected"), [
    ("import os\nx = os.environ.get('A')", [(2, None, "os.environ")]),
    ("import os as o\ndef f():\n    return o.getenv('A')", [(3, "f", "o.getenv")]),
    ("from os import environ as e\ndef g():\n    return e['A']",
     [(1, None, "from os import ..."), (3, "g", "e")]),
    ("import os\nx = os.path.join('a')", []),
    ("environ = {}\nx = environ.get('A')", []),  # a local name, not the process's
])
def test_the_scan_finds_each_way_of_reading_the_environment(
        source: str, expected: list[tuple[int, str | None, str]]) -> None:
    assert list(environment_reads(source)) == expected


def test_every_setting_in_the_readme_table() -> None:
    # the README's "Settings" table lists every variable the model reads (a family's
    # members as `TIERQ_BACKOFF_KIND` / `_BASE_SECONDS`: by a suffix)
    readme = (PACKAGE.parents[1] / "README.md").read_text()
    table = readme[readme.index("\n## Settings"):]
    table = table[:table.index("\n## ", 1)]
    missing = [field.variable for field in Settings.fields.values()
               if not any(f"`{name}`" in table for name in _names(field.variable))]
    assert missing == [], f"README.md's Settings table lacks {missing}"


def _names(alias: str) -> list[str]:
    """``alias`` and its suffixes from an underscore (``_BASE_SECONDS``, ``_SECONDS``)."""
    words = alias.split("_")
    return [alias] + ["_" + "_".join(words[k:]) for k in range(2, len(words))]


def test_the_settings_read_the_mapping_given_not_the_process(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERQ_TICK_MAX_SECONDS", "20")
    assert Settings().tick_max_seconds == 20
    assert Settings.from_environ({}).tick_max_seconds == 55
    assert Settings.from_environ({"tierq_tick_max_seconds": "7"}).tick_max_seconds == 7
    # given values win over the mapping, by field or by variable name
    assert Settings.from_environ({"TIERQ_TICK_MAX_SECONDS": "7"},
                                 tick_max_seconds=8).tick_max_seconds == 8


def test_new_fields_defaults() -> None:
    settings = Settings.from_environ({})
    assert (settings.shard_urls, settings.shard_names, settings.shard_directory,
            settings.shard_proxy_prefix) == ("", "", "", "")
    assert (settings.tick_max_seconds, settings.tick_safety_seconds) == (55.0, 10.0)
    assert (settings.powertools_service_name, settings.powertools_metrics_namespace,
            settings.powertools_trace_disabled) == ("tierq", "Tierq", False)
    assert settings.region == ""
    assert Settings.from_environ({"AWS_DEFAULT_REGION": "us-west-2"}).region == "us-west-2"
    assert Settings.from_environ({"AWS_REGION": " eu-west-1 ",
                                  "AWS_DEFAULT_REGION": "us-west-2"}).region == "eu-west-1"
    # an empty tick variable is its default (a template may pass one empty)
    ticks = Settings.from_environ({"TIERQ_TICK_MAX_SECONDS": " ", "TIERQ_TICK_SAFETY_SECONDS": ""})
    assert (ticks.tick_max_seconds, ticks.tick_safety_seconds) == (55.0, 10.0)
    shards = Settings.from_environ({"TIERQ_SHARD_URLS": " a=postgresql://h/a, b=postgresql://h/b ",
                                    "TIERQ_SHARD_NAMES": "default, b",
                                    "TIERQ_SHARD_DIRECTORY": " /tierq/x/shards "})
    assert (shards.shard_urls, shards.shard_names, shards.shard_directory) == (
        "a=postgresql://h/a, b=postgresql://h/b", "default, b", "/tierq/x/shards")


@pytest.mark.parametrize(("variable", "value", "says"), [
    ("TIERQ_TICK_MAX_SECONDS", "-1", "greater than or equal to 0"),
    ("TIERQ_TICK_MAX_SECONDS", "901", "less than or equal to 900"),
    ("TIERQ_TICK_MAX_SECONDS", "nan", "finite number"),
    ("TIERQ_TICK_SAFETY_SECONDS", "inf", "finite number"),
    ("TIERQ_TICK_SAFETY_SECONDS", "ten", "valid number"),
    ("POWERTOOLS_METRICS_NAMESPACE", "AWS/Lambda", "must not start with AWS/"),
    ("POWERTOOLS_METRICS_NAMESPACE", "Tierq€", "must match the pattern"),
    ("POWERTOOLS_METRICS_NAMESPACE", "x" * 256, "at most 255 characters"),
    ("POWERTOOLS_SERVICE_NAME", "", "at least 1 character"),
    ("POWERTOOLS_TRACE_DISABLED", "maybe", "valid boolean"),
    ("TIERQ_SHARD_NAMES", "default,Blue", "lower-case"),
    ("TIERQ_SHARD_URLS", "a=postgresql://h/a,a=postgresql://h/b", "are the same"),
])
def test_a_bad_value_is_refused_naming_its_variable(variable: str, value: str,
                                                    says: str) -> None:
    from tierq.config import SettingsError

    with pytest.raises(SettingsError, match=says) as refused:
        Settings.from_environ({variable: value})
    assert variable in str(refused.value)


def test_a_bad_setting_fails_the_first_request_not_the_import() -> None:
    """The runtime builds its logger and tracer at import from the settings; with a bad one
    it imports with the defaults, and reading the settings (the engine, on the first
    request) raises naming the variable."""
    import subprocess
    import sys

    code = ("import tierq.aws.runtime as r\nprint(r.SERVICE)\n"
            "from tierq.config import get_settings\n"
            "try:\n    get_settings()\nexcept Exception as e:\n    print(type(e).__name__, e)")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PACKAGE.parent),
           "TIERQ_TICK_MAX_SECONDS": "-5", "POWERTOOLS_SERVICE_NAME": "svc"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    first, rest = done.stdout.split("\n", 1)
    assert first == "tierq"  # the default service, not the unread "svc"
    assert rest.startswith("SettingsError") and "TIERQ_TICK_MAX_SECONDS" in rest
