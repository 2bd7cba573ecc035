"""Lambda layer benchmark: the layer's unzipped size and each function's cold import time.

    .venv/bin/python -m bench.lambda_layer                      # this checkout, 3 repeats
    .venv/bin/python -m bench.lambda_layer --repo-root /tmp/x --repeats 5

1. Builds the layer with the checkout's own ``layers/tierq/build_layer.py`` into a
   temporary directory, for this machine's architecture (x86_64 or arm64), and sums the
   sizes of its files (``layer_mb``, MiB as Lambda counts its 250 MB limit).
2. Installs the AWS SDK (boto3, botocore) into a directory of its own: the layer leaves it
   to the Lambda runtime, whose ``/var/runtime`` carries it; this stands in for that.
3. For every function of ``template.yaml`` (``AWS::Serverless::Function`` with
   ``CodeUri: functions/<name>/``), imports the handler module in a fresh interpreter of
   the Python the layer is built for (3.13, as the template's runtime) and times the
   import alone (median of ``--repeats`` runs). The interpreter runs with ``-S -s`` (no
   site-packages, no user site) and an environment of its own: ``PYTHONPATH`` is the
   function's directory, the layer's ``python/`` and the SDK directory (Lambda's order:
   ``/var/task``, ``/opt/python``, ``/var/runtime``), ``PYTHONDONTWRITEBYTECODE=1`` so
   only bytecode shipped in the layer is used, and the variables Lambda and the template
   set. Nothing comes from this machine's virtual environment: a module missing from the
   layer fails the run. Tracing is off (``POWERTOOLS_TRACE_DISABLED=true``) unless
   ``--tracing``.

4. The floor: a stand-in function that imports the runtime's third-party libraries alone
   (``RUNTIME_LIBRARIES``), measured the same way (``libraries_floor_ms``). And tierq's
   own share of each function's import: in one interpreter, the floor imported first, then
   the handler, whose import alone is timed (median of ``--repeats``): what the function
   imports beyond the libraries, without the noise of subtracting two runs. The slowest
   function's is ``own_share_ms`` (docs/architecture.md, the Lambda runtime: at most 50).
5. The own share beyond the libraries' machinery as well (when the layer holds pydantic and
   Powertools): the same, after a floor that also defines one pydantic model (built on
   first use) and a validating Powertools resolver with one route, which ``import
   pydantic`` alone does not load (pydantic 2 resolves its names on first read):
   ``own_share_beyond_machinery_ms``, what tierq's own modules cost.

Last lines: ``own_share_beyond_machinery_ms=M`` (with pydantic and Powertools in the
layer), ``libraries_floor_ms=F`` and ``own_share_ms=S`` (when the layer holds the
libraries), ``layer_mb=M`` and ``max_handler_import_ms=N``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

DEFAULT_REPO_ROOT = Path(__file__).resolve().parents[1]
# The Lambda runtime of template.yaml; the layer's wheels and bytecode are for it
# (build_layer.PYTHON_VERSION).
LAMBDA_PYTHON = "3.13"
# Modules worth naming when they are loaded by an import: the heavy, optional ones.
# botocore alone is its package's __init__ (Powertools imports it to register a user-agent
# hook); botocore.session is the SDK proper.
WATCHED_MODULES = ("aws_xray_sdk", "botocore", "botocore.session", "boto3", "typer", "rich",
                   "httpx", "yaml")
MIB = 1024 * 1024
# The third-party packages every function imports, alone: the floor under any function's
# import on this machine (tierq's own modules and pydantic model building come on top).
RUNTIME_LIBRARIES = ("pydantic", "psycopg", "psycopg_pool", "redis",
                     "orjson", "croniter", "aws_lambda_powertools.event_handler")
FLOOR_NAME = "(libraries)"
# What a function with one pydantic model and a validating resolver loads beyond importing
# the libraries: pydantic's model machinery and Powertools' request validation.
MACHINERY = """\
from pydantic import BaseModel, ConfigDict
class _Model(BaseModel):
    model_config = ConfigDict(defer_build=True)
    value: int
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
_app = APIGatewayHttpResolver(enable_validation=True)
@_app.get("/<name>")
def _route(name: str) -> dict[str, str]:
    return {"name": name}
"""
MACHINERY_NAME = "(machinery)"

# Runs inside the measured interpreter: nothing but `time` (and, for the own share, the
# floor's imports) before the clock starts.
PROBE = """\
import time
{before}
start, start_cpu = time.perf_counter(), time.process_time()
import {module}
elapsed, elapsed_cpu = time.perf_counter() - start, time.process_time() - start_cpu
import json, sys
watched = {watched!r}
print(json.dumps({{
    "import_ms": elapsed * 1000.0,
    "cpu_ms": elapsed_cpu * 1000.0,
    "modules": len(sys.modules),
    "loaded": [name for name in watched if name in sys.modules],
}}))
"""


def say(message: str) -> None:
    print(f"[lambda_layer] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Function:
    name: str
    code_dir: Path
    module: str


@dataclass(frozen=True)
class ImportResult:
    function: Function
    import_ms: list[float]
    cpu_ms: list[float]
    modules: int
    loaded: list[str]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.import_ms)

    @property
    def median_cpu_ms(self) -> float:
        return statistics.median(self.cpu_ms)


def machine_arch() -> str:
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64"):
        return "x86_64"
    if machine in ("aarch64", "arm64"):
        return "arm64"
    raise SystemExit(f"no Lambda architecture for this machine ({machine})")


# Globals variables read at import or at the first model by the runtime's libraries
# (Powertools', pydantic's): the rest name AWS resources that no import touches.
IMPORT_VARIABLE_PREFIXES = ("POWERTOOLS_", "PYDANTIC_")


def globals_import_environment(repo_root: Path) -> dict[str, str]:
    """template.yaml's Globals variables named with IMPORT_VARIABLE_PREFIXES whose value is
    literal (a ``!Ref`` is a deployment's choice: ``lambda_environment`` sets its default)."""
    text = (repo_root / "template.yaml").read_text()
    block = re.search(r"^Globals:\n((?:  .*\n|\s*\n)+)", text, re.M)
    variables = re.search(r"^    Environment:\n      Variables:\n((?:        .*\n|\s*\n)+)",
                          block.group(1) if block else "", re.M)
    found = {}
    for name, value in re.findall(r"^        ([A-Z][A-Z0-9_]*):\s*(\S.*?)\s*$",
                                  variables.group(1) if variables else "", re.M):
        value = re.sub(r"\s+#.*$", "", value)
        if name.startswith(IMPORT_VARIABLE_PREFIXES) and not value.startswith("!"):
            quoted = len(value) > 1 and value[0] == value[-1] and value[0] in "\"'"
            found[name] = value[1:-1] if quoted else value
    return found


def template_functions(repo_root: Path) -> list[Function]:
    """The template's functions whose code is a folder of functions/, in template order.

    A line scan, not a YAML parse: the template's CloudFormation tags (!Ref, !If, …) need a
    loader of their own, and only three keys of each resource matter here."""
    text = (repo_root / "template.yaml").read_text()
    global_handler = "app.lambda_handler"
    globals_match = re.search(r"^Globals:\n  Function:\n((?:    .*\n|\s*\n)+)", text, re.M)
    if globals_match:
        found = re.search(r"^    Handler:\s*(\S+)", globals_match.group(1), re.M)
        if found:
            global_handler = found.group(1)
    resources = text.split("\nResources:\n", 1)[1]
    functions = []
    # Each resource is a key at two spaces of indentation under Resources.
    for block in re.split(r"\n(?=  [A-Za-z0-9]+:\s*\n)", resources):
        if not re.search(r"^    Type:\s*AWS::Serverless::Function\s*$", block, re.M):
            continue
        code_uri = re.search(r"^      CodeUri:\s*(functions/[^/\s]+)/?\s*$", block, re.M)
        if not code_uri:
            continue
        handler = re.search(r"^      Handler:\s*(\S+)", block, re.M)
        module = (handler.group(1) if handler else global_handler).rsplit(".", 1)[0]
        code_dir = repo_root / code_uri.group(1)
        functions.append(Function(code_dir.name, code_dir, module))
    if not functions:
        raise SystemExit("template.yaml declares no function with CodeUri: functions/<name>/")
    return functions


def find_lambda_python(explicit: str | None) -> str:
    """An interpreter of the Lambda runtime's Python version (the layer's bytecode and
    compiled wheels are for it), found as the layer build finds its compiler."""
    return load_build_layer().find_runtime_python(explicit)


def load_build_layer() -> ModuleType:
    """This checkout's layers/tierq/build_layer.py (a script, not a package) as a module."""
    path = DEFAULT_REPO_ROOT / "layers" / "tierq" / "build_layer.py"
    spec = importlib.util.spec_from_file_location("tierq_build_layer", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_layer(repo_root: Path, out: Path, arch: str) -> None:
    script = repo_root / "layers" / "tierq" / "build_layer.py"
    command = [sys.executable, str(script), "--repo-root", str(repo_root), "--out", str(out),
               "--arch", arch]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"layer build failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")


def install_runtime_sdk(out: Path, python: str) -> None:
    """boto3 and botocore as the Lambda runtime's /var/runtime provides them: pure Python,
    with bytecode (the runtime's own files are compiled; only the layer is on trial)."""
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile",
               "--target", str(out), "--python-version", LAMBDA_PYTHON, "--only-binary=:all:",
               "boto3"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"installing boto3 failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    subprocess.run([python, "-m", "compileall", "-q", str(out)], capture_output=True,
                   check=True)


def tree_bytes(root: Path) -> int:
    """The sum of the files' sizes: what Lambda counts against its 250 MB unzipped limit."""
    return sum(path.stat().st_size for path in root.rglob("*")
               if path.is_file() and not path.is_symlink())


def disk_bytes(root: Path) -> int:
    """Disk usage as `du` reports it (whole blocks per file), for comparison with `du -sh`."""
    return sum(path.stat().st_blocks * 512 for path in root.rglob("*")
               if path.is_file() and not path.is_symlink())


def lambda_environment(function: Function, layer_python: Path, runtime_dir: Path,
                       tracing: bool, template_env: Mapping[str, str]) -> dict[str, str]:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "en_US.UTF-8",
        "TZ": ":UTC",
        "PYTHONPATH": os.pathsep.join(
            [str(function.code_dir), str(layer_python), str(runtime_dir)]),
        "PYTHONDONTWRITEBYTECODE": "1",
        # What Lambda sets in every function's environment …
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EXECUTION_ENV": f"AWS_Lambda_python{LAMBDA_PYTHON}",
        "AWS_LAMBDA_FUNCTION_NAME": f"tierq-{function.name}",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
        "LAMBDA_TASK_ROOT": str(function.code_dir),
        "_HANDLER": f"{function.module}.lambda_handler",
        # … and what template.yaml's Globals add that matters at import
        # (globals_import_environment), its log level a parameter (LogLevel's default).
        "POWERTOOLS_LOG_LEVEL": "INFO",
        **template_env,
    }
    if not tracing:
        env["POWERTOOLS_TRACE_DISABLED"] = "true"
    return env


def import_once(python: str, function: Function, env: dict[str, str],
                before: str = "") -> dict[str, object]:
    """One import of the function's handler module in a fresh interpreter; ``before``:
    modules imported first, outside the timing (the floor, for the own share)."""
    probe = PROBE.format(module=function.module, watched=WATCHED_MODULES,
                         before=f"import {before}" if before else "")
    done = subprocess.run([python, "-S", "-s", "-c", probe], env=env, cwd=function.code_dir,
                          capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0:
        raise SystemExit(
            f"importing {function.name}/{function.module}.py from the layer failed:\n"
            f"{done.stderr[-3000:]}")
    last_line = done.stdout.strip().splitlines()[-1]
    result: dict[str, object] = json.loads(last_line)
    return result


def libraries_floor(work: Path, layer_python: Path) -> Function | None:
    """A stand-in function whose module imports those of RUNTIME_LIBRARIES the layer holds,
    and nothing of tierq; None when it holds none of them."""
    present = [name for name in RUNTIME_LIBRARIES
               if (layer_python / name.split(".")[0]).is_dir()]
    if not present:
        return None
    code_dir = work / "floor"
    code_dir.mkdir()
    (code_dir / "runtime_libraries.py").write_text(
        "".join(f"import {name}\n" for name in present))
    return Function(FLOOR_NAME, code_dir, "runtime_libraries")


def machinery_floor(work: Path, layer_python: Path, floor: Function) -> Function | None:
    """A stand-in function that imports the floor's libraries, then defines a pydantic model
    and a validating resolver (``MACHINERY``); None without pydantic and Powertools."""
    if not all((layer_python / name).is_dir() for name in ("pydantic", "aws_lambda_powertools")):
        return None
    code_dir = work / "machinery"
    code_dir.mkdir()
    (code_dir / "runtime_machinery.py").write_text(
        (floor.code_dir / f"{floor.module}.py").read_text() + MACHINERY)
    return Function(MACHINERY_NAME, code_dir, "runtime_machinery")


def measure(python: str, functions: list[Function], layer_python: Path, runtime_dir: Path,
            repeats: int, tracing: bool, template_env: Mapping[str, str],
            floor: Function | None = None) -> list[ImportResult]:
    """Each function's import (median of ``repeats``); with ``floor``, its import after the
    floor's modules (the own share)."""
    results = []
    for index, function in enumerate(functions, 1):
        env = lambda_environment(function, layer_python, runtime_dir, tracing, template_env)
        if floor is not None:  # the floor's module is found next to the function's
            env["PYTHONPATH"] = os.pathsep.join([str(floor.code_dir), env["PYTHONPATH"]])
        runs = [import_once(python, function, env, floor.module if floor else "")
                for _ in range(repeats)]
        result = ImportResult(
            function,
            [float(run["import_ms"]) for run in runs],  # type: ignore[arg-type]
            [float(run["cpu_ms"]) for run in runs],  # type: ignore[arg-type]
            int(runs[-1]["modules"]),  # type: ignore[call-overload]
            list(runs[-1]["loaded"]),  # type: ignore[call-overload]
        )
        say(f"[{index}/{len(functions)}] {function.name}: {result.median_ms:.0f} ms "
            f"(CPU {result.median_cpu_ms:.0f} ms) "
            f"(wall runs: {', '.join(f'{ms:.0f}' for ms in result.import_ms)})")
        results.append(result)
    return results


def print_report(results: list[ImportResult], layer: LayerFacts, python: str, arch: str,
                 repeats: int, tracing: bool) -> None:
    print(f"layer: {layer.bytes / MIB:.1f} MiB unzipped ({layer.disk_bytes / MIB:.1f} MiB on "
          f"disk, as du counts), {layer.files} files, arch {arch}")
    print(f"interpreter: {python} (-S -s, PYTHONDONTWRITEBYTECODE=1), "
          f"tracing {'on' if tracing else 'off'}, median of {repeats}")
    header = (f"{'function':<14} {'import_ms':>9} {'min_ms':>7} {'max_ms':>7} {'cpu_ms':>7} "
              f"{'modules':>7}  loaded")
    print(header)
    print("-" * len(header))
    for result in results:
        print(f"{result.function.name:<14} {result.median_ms:>9.0f} {min(result.import_ms):>7.0f} "
              f"{max(result.import_ms):>7.0f} {result.median_cpu_ms:>7.0f} {result.modules:>7}  "
              f"{', '.join(result.loaded) or '-'}")


@dataclass(frozen=True)
class LayerFacts:
    bytes: int
    disk_bytes: int
    files: int


def layer_facts(layer_python: Path) -> LayerFacts:
    files = sum(1 for path in layer_python.rglob("*") if path.is_file())
    return LayerFacts(tree_bytes(layer_python), disk_bytes(layer_python), files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo-root", type=Path, default=DEFAULT_REPO_ROOT,
                        help="the checkout whose layer and functions are measured")
    parser.add_argument("--repeats", type=int, default=3, help="imports per function")
    parser.add_argument("--python", help=f"a Python {LAMBDA_PYTHON} interpreter to import with")
    parser.add_argument("--tracing", action="store_true",
                        help="leave Powertools tracing on, as with Tracing: Active in Lambda")
    built = parser.add_mutually_exclusive_group()
    built.add_argument("--keep", type=Path,
                       help="build the layer into this directory (its python/) and keep it")
    built.add_argument("--layer", type=Path,
                       help="measure this already built layer directory (its python/) instead "
                            "of building one")
    parser.add_argument("--no-runtime-sdk", action="store_true",
                        help="leave boto3/botocore out as well (an import that needs them fails)")
    parser.add_argument("--json", type=Path, help="write the results as JSON to this file")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")

    repo_root = args.repo_root.resolve()
    arch = machine_arch()
    python = find_lambda_python(args.python)
    functions = template_functions(repo_root)
    template_env = globals_import_environment(repo_root)
    with tempfile.TemporaryDirectory(prefix="tierq-layer-bench-") as tmp:
        work = Path(tmp)
        if args.layer:
            layer_python = args.layer.resolve() / "python"
            if not layer_python.is_dir():
                parser.error(f"{layer_python} is not a directory")
        else:
            layer_python = (args.keep.resolve() if args.keep else work / "layer") / "python"
            say(f"building the layer of {repo_root} for {arch} into {layer_python.parent} …")
            started = time.perf_counter()
            build_layer(repo_root, layer_python, arch)
            say(f"layer built in {time.perf_counter() - started:.0f} s")
        layer = layer_facts(layer_python)
        say(f"layer: {layer.bytes / MIB:.1f} MiB in {layer.files} files")
        runtime_dir = work / "runtime"
        runtime_dir.mkdir()
        if not args.no_runtime_sdk:
            say("installing boto3/botocore in place of the Lambda runtime's /var/runtime …")
            install_runtime_sdk(runtime_dir, python)
        say(f"importing {len(functions)} functions with {python}, {args.repeats} time(s) each …")
        results = measure(python, functions, layer_python, runtime_dir, args.repeats,
                          args.tracing, template_env)
        floor_function = libraries_floor(work, layer_python)
        floor = (measure(python, [floor_function], layer_python, runtime_dir, args.repeats,
                         args.tracing, template_env)[0] if floor_function else None)
        own: list[ImportResult] = []
        beyond: list[ImportResult] = []
        if floor_function is not None:
            say("each function's own share: its import after the libraries' …")
            own = measure(python, functions, layer_python, runtime_dir, args.repeats,
                          args.tracing, template_env, floor=floor_function)
            machinery_function = machinery_floor(work, layer_python, floor_function)
            if machinery_function is not None:
                say("each function's own share beyond the libraries' machinery …")
                beyond = measure(python, functions, layer_python, runtime_dir, args.repeats,
                                 args.tracing, template_env, floor=machinery_function)

    print_report([*results, *([floor] if floor else [])], layer, python, arch, args.repeats,
                 args.tracing)
    max_ms = max(result.median_ms for result in results)
    own_share_ms = max((result.median_ms for result in own), default=None)
    beyond_ms = max((result.median_ms for result in beyond), default=None)
    if own:
        print("own share (import after the libraries, median; CPU):",
              ", ".join(f"{result.function.name} {result.median_ms:.0f} ms "
                        f"({result.median_cpu_ms:.0f})" for result in own))
    if beyond:
        print("own share beyond the machinery (import after a model and a resolver, median; "
              "CPU):", ", ".join(f"{result.function.name} {result.median_ms:.0f} ms "
                                 f"({result.median_cpu_ms:.0f})" for result in beyond))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "repo_root": str(repo_root),
            "arch": arch,
            "python": python,
            "tracing": args.tracing,
            "runtime_sdk": not args.no_runtime_sdk,
            "repeats": args.repeats,
            "layer_bytes": layer.bytes,
            "layer_disk_bytes": layer.disk_bytes,
            "layer_files": layer.files,
            "functions": [{
                "name": result.function.name,
                "module": result.function.module,
                "import_ms": result.import_ms,
                "median_ms": result.median_ms,
                "cpu_ms": result.cpu_ms,
                "modules": result.modules,
                "loaded": result.loaded,
            } for result in results],
            "max_handler_import_ms": max_ms,
            "libraries_floor_ms": floor.median_ms if floor else None,
            "own_share_ms": own_share_ms,
            "own_share": {result.function.name: result.import_ms for result in own},
            "own_share_cpu": {result.function.name: result.cpu_ms for result in own},
            "own_share_beyond_machinery_ms": beyond_ms,
            "own_share_beyond_machinery": {result.function.name: result.import_ms
                                           for result in beyond},
            "own_share_beyond_machinery_cpu": {result.function.name: result.cpu_ms
                                               for result in beyond},
        }, indent=2) + "\n")
    if beyond_ms is not None:
        print(f"own_share_beyond_machinery_ms={beyond_ms:.0f}  (the slowest function's import "
              "beyond the libraries, a pydantic model and a validating resolver)")
    if floor:
        print(f"libraries_floor_ms={floor.median_ms:.0f}  "
              "(the runtime's third-party packages alone, without tierq)")
    if own_share_ms is not None:
        print(f"own_share_ms={own_share_ms:.0f}  "
              "(the slowest function's import beyond the libraries)")
    print(f"layer_mb={layer.bytes / MIB:.1f}")
    print(f"max_handler_import_ms={max_ms:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
