"""bench.lambda_layer: which functions it finds in template.yaml, and that it imports each
one from the layer alone (nothing of this virtual environment, no bytecode written), on a
stand-in checkout whose "layer build" is instant. The real layer build needs a minute and
PyPI; `python -m bench.lambda_layer` does that."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.lambda_layer import (
    LAMBDA_PYTHON,
    find_lambda_python,
    globals_import_environment,
    template_functions,
)

ROOT = Path(__file__).resolve().parents[2]

TEMPLATE = """\
Globals:
  Function:
    Runtime: python3.13
    Handler: app.lambda_handler
    Timeout: 29

Resources:
  Queue:
    Type: AWS::SQS::Queue
    Properties:
      QueueName: not-a-function
  OneFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/one/
  TwoFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/two
      Handler: main.handler
      Environment:
        Variables:
          A: b
"""

# Stands in for layers/tierq/build_layer.py: one small pure-Python package in python/.
FAKE_BUILD = """\
import argparse, pathlib
parser = argparse.ArgumentParser()
parser.add_argument("--repo-root"); parser.add_argument("--out"); parser.add_argument("--arch")
args = parser.parse_args()
package = pathlib.Path(args.out) / "layerlib"
package.mkdir(parents=True)
(package / "__init__.py").write_text("VALUE = 42\\n" + "# padding\\n" * 1000)
if pathlib.Path(args.repo_root, "with-floor").exists():  # a runtime library: a floor
    orjson = pathlib.Path(args.out) / "orjson"
    orjson.mkdir()
    (orjson / "__init__.py").write_text("FLOOR = True\\n")
"""


def lambda_python() -> str:
    try:
        return find_lambda_python(None)
    except SystemExit:
        pytest.skip(f"no Python {LAMBDA_PYTHON} on this machine")


def stand_in_checkout(root: Path, one_imports: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "template.yaml").write_text(TEMPLATE)
    (root / "layers" / "tierq").mkdir(parents=True)
    (root / "layers" / "tierq" / "build_layer.py").write_text(FAKE_BUILD)
    (root / "functions" / "one").mkdir(parents=True)
    (root / "functions" / "one" / "app.py").write_text(f"import {one_imports}\n")
    (root / "functions" / "two").mkdir(parents=True)
    (root / "functions" / "two" / "main.py").write_text("import layerlib\nhandler = None\n")
    return root


def run_bench(repo: Path, *args: str, env: dict[str, str] | None = None
              ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.lambda_layer", "--repo-root", str(repo), "--repeats", "2",
         "--no-runtime-sdk", "--python", lambda_python(), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False, env=env)


def test_every_function_of_the_real_template_is_found_with_its_handler_module() -> None:
    functions = template_functions(ROOT)
    with_app = sorted(path.parent.name for path in (ROOT / "functions").glob("*/app.py"))
    assert sorted(function.name for function in functions) == with_app
    assert {function.module for function in functions} == {"app"}


GLOBALS_WITH_ENVIRONMENT = """\
Globals:
  Function:
    Runtime: python3.13
    Environment:
      Variables:
        # a comment
        DB_PORT: "5432"
        POWERTOOLS_SERVICE_NAME: tierq  # the service
        POWERTOOLS_METRICS_NAMESPACE: "Tierq"
        POWERTOOLS_LOG_LEVEL: !Ref LogLevel
        PYDANTIC_DISABLE_PLUGINS: __all__
        VALKEY_URL: !Sub rediss://x
    Tags:
      app: tierq

Resources:
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Environment:
        Variables:
          POWERTOOLS_OTHER: not-global
"""


def test_the_import_environment_is_the_globals_literal_powertools_and_pydantic_variables(
        tmp_path: Path) -> None:
    (tmp_path / "template.yaml").write_text(GLOBALS_WITH_ENVIRONMENT)
    assert globals_import_environment(tmp_path) == {
        "POWERTOOLS_SERVICE_NAME": "tierq", "POWERTOOLS_METRICS_NAMESPACE": "Tierq",
        "PYDANTIC_DISABLE_PLUGINS": "__all__"}


def test_the_real_template_turns_pydantic_plugin_discovery_off() -> None:
    """pydantic scans every distribution's entry points at its first model unless told not
    to: the functions (and so the benchmark's imports) are told not to."""
    environment = globals_import_environment(ROOT)
    assert environment["PYDANTIC_DISABLE_PLUGINS"] == "__all__"
    assert environment["POWERTOOLS_SERVICE_NAME"] == "tierq"


def test_the_stand_in_template_yields_functions_only_with_their_own_handler(
        tmp_path: Path) -> None:
    functions = template_functions(stand_in_checkout(tmp_path, "layerlib"))
    assert [(function.name, function.module) for function in functions] == [
        ("one", "app"), ("two", "main")]


def test_imports_each_function_from_the_layer_and_ends_with_the_two_figures(
        tmp_path: Path) -> None:
    repo = stand_in_checkout(tmp_path / "repo", "layerlib")
    kept = tmp_path / "kept"
    done = run_bench(repo, "--keep", str(kept), "--json", str(tmp_path / "out.json"))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    layer_file = kept / "python" / "layerlib" / "__init__.py"
    assert lines[-2] == f"layer_mb={layer_file.stat().st_size / 1024 / 1024:.1f}"
    assert lines[-1].startswith("max_handler_import_ms=")
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["layer_bytes"] == layer_file.stat().st_size
    assert [(f["name"], f["module"], len(f["import_ms"])) for f in result["functions"]] == [
        ("one", "app", 2), ("two", "main", 2)]
    assert result["max_handler_import_ms"] == max(f["median_ms"] for f in result["functions"])
    # PYTHONDONTWRITEBYTECODE: the imports left no bytecode behind in the layer
    assert not list(kept.rglob("__pycache__")), list(kept.rglob("*.pyc"))
    assert "[1/2] one" in done.stderr and "[2/2] two" in done.stderr
    # the stand-in layer holds none of the runtime's libraries: no floor to measure
    assert not any(line.startswith(("libraries_floor_ms=", "own_share_ms=")) for line in lines)
    assert result["libraries_floor_ms"] is None
    assert result["own_share_ms"] is None


def test_with_the_libraries_in_the_layer_the_floor_and_each_own_share(tmp_path: Path) -> None:
    repo = stand_in_checkout(tmp_path / "repo", "layerlib, orjson")
    (repo / "with-floor").touch()
    done = run_bench(repo, "--json", str(tmp_path / "out.json"))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    result = json.loads((tmp_path / "out.json").read_text())
    assert lines[-4] == f"libraries_floor_ms={result['libraries_floor_ms']:.0f}  " \
        "(the runtime's third-party packages alone, without tierq)"
    assert lines[-3].startswith(f"own_share_ms={result['own_share_ms']:.0f}  ")
    assert sorted(result["own_share"]) == ["one", "two"]
    assert all(len(runs) == 2 for runs in result["own_share"].values())
    medians = [sorted(runs)[0] + (sorted(runs)[1] - sorted(runs)[0]) / 2
               for runs in result["own_share"].values()]
    assert result["own_share_ms"] == pytest.approx(max(medians))
    # no pydantic or Powertools in the stand-in layer: no machinery floor
    assert result["own_share_beyond_machinery_ms"] is None
    assert not any(line.startswith("own_share_beyond_machinery_ms=") for line in lines)


def test_a_module_found_only_in_this_environment_fails_the_run(tmp_path: Path) -> None:
    # pytest is installed here but not in the layer: the import must not find it, not even
    # when the caller's PYTHONPATH points at this environment's site-packages
    repo = stand_in_checkout(tmp_path / "repo", "pytest")
    site_packages = str(Path(pytest.__file__).resolve().parents[1])
    done = run_bench(repo, env={**os.environ, "PYTHONPATH": f"{ROOT}:{site_packages}"})
    assert done.returncode != 0
    assert "importing one/app.py from the layer failed" in done.stderr, done.stderr
    assert "ModuleNotFoundError: No module named 'pytest'" in done.stderr, done.stderr


def test_the_layer_build_compiles_tierq_beside_its_sources_and_the_rest_in_their_place(
        tmp_path: Path) -> None:
    from bench.lambda_layer import load_build_layer

    build_layer = load_build_layer()
    python = lambda_python()
    out = tmp_path / "python"
    (out / "tierq").mkdir(parents=True)
    (out / "tierq" / "__init__.py").write_text("from otherlib import VALUE\n")
    (out / "tierq" / "core").mkdir()
    shutil.copy(ROOT / "shared" / "tierq" / "core" / "module_code.py",
                out / "tierq" / "core" / "module_code.py")
    (out / "otherlib").mkdir()
    (out / "otherlib" / "__init__.py").write_text("VALUE = 7\n")
    (out / "otherlib" / "__init__.pyi").write_text("VALUE: int\n")
    (out / "otherlib" / "_speedups.c").write_text("int x;\n")
    (out / "otherlib-stubs").mkdir()
    (out / "otherlib-stubs" / "__init__.pyi").write_text("VALUE: int\n")
    (out / "single.py").write_text("ONE = 1\n")

    build_layer.drop_build_only_files(out)
    build_layer.compile_bytecode(out, python)

    tag = f"cpython-{LAMBDA_PYTHON.replace('.', '')}"
    files = sorted(str(path.relative_to(out)) for path in out.rglob("*") if path.is_file())
    assert files == ["otherlib/__init__.pyc", "single.pyc", "tierq/__init__.py",
                     f"tierq/__pycache__/__init__.{tag}.pyc",
                     f"tierq/core/__pycache__/module_code.{tag}.pyc",
                     "tierq/core/module_code.marshal", "tierq/core/module_code.py"]
    # unchecked-hash: flags 0b01 in the .pyc header (hash-based, check_source off)
    pyc = out / files[3]
    assert int.from_bytes(pyc.read_bytes()[4:8], "little") == 0b01
    # the same bytecode, all of tierq's modules, in the module store
    store = (out / "tierq" / "core" / "module_code.marshal").read_bytes()
    assert store[:4] == pyc.read_bytes()[:4]
    assert pyc.read_bytes()[16:] in store
    done = subprocess.run(
        [python, "-S", "-s", "-c", "import tierq, single; print(tierq.VALUE + single.ONE)"],
        env={"PYTHONPATH": str(out), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True, text=True, check=False, timeout=60)
    assert done.stdout.strip() == "8", done.stderr


# A function whose initialisation defines dataclasses, as the real ones do.
RECORDED_APP = """\
from dataclasses import dataclass
from tierq.core.cold_start import initialising

with initialising():
    @dataclass(frozen=True)
    class Point:
        x: int
        y: int = 0

    @dataclass
    class Box:
        corner: Point
        label: str = "box"
"""
COUNTS_AFTER_IMPORT = """\
import app
from tierq.core import dataclass_code
print(*dataclass_code.counts())
"""


def test_the_layer_build_records_each_functions_dataclasses_and_a_cold_start_reads_them(
        tmp_path: Path) -> None:
    import shutil

    from bench.lambda_layer import load_build_layer

    build_layer = load_build_layer()
    python = lambda_python()
    repo = tmp_path / "repo"
    for name in ("one", "two"):
        (repo / "functions" / name).mkdir(parents=True)
        (repo / "functions" / name / "app.py").write_text(
            RECORDED_APP.replace("label", "label" if name == "one" else "tag"))
    out = tmp_path / "python"
    shutil.copytree(ROOT / "shared" / "tierq", out / "tierq",
                    ignore=shutil.ignore_patterns("__pycache__"))

    held = build_layer.record_dataclass_code(repo, out, python, out)

    assert (out / "tierq" / "core" / "dataclass_code.marshal").is_file()
    assert held == 3  # Point's, Box's, and Box's with a tag: one text a class on 3.13
    for name in ("one", "two"):
        done = subprocess.run(
            [python, "-S", "-s", "-c", COUNTS_AFTER_IMPORT],
            env={"PYTHONPATH": os.pathsep.join([str(repo / "functions" / name), str(out)]),
                 "PYTHONDONTWRITEBYTECODE": "1"},
            cwd=repo / "functions" / name, capture_output=True, text=True, check=False,
            timeout=60)
        assert done.returncode == 0, done.stderr
        hits, misses = map(int, done.stdout.split())
        assert (hits, misses) == (2, 0), (name, done.stdout)


def test_a_function_that_fails_to_import_fails_the_recording(tmp_path: Path) -> None:
    from bench.lambda_layer import load_build_layer

    build_layer = load_build_layer()
    repo = tmp_path / "repo"
    (repo / "functions" / "broken").mkdir(parents=True)
    (repo / "functions" / "broken" / "app.py").write_text("import not_in_the_layer\n")
    out = tmp_path / "python"
    (out / "tierq").mkdir(parents=True)
    with pytest.raises(build_layer.RecordingFailed,
                       match=r"importing broken/app\.py to record its dataclasses"):
        build_layer.record_dataclass_code(repo, out, lambda_python(), ROOT / "shared")
    assert not (out / "tierq" / "core" / "dataclass_code.marshal").exists()


def test_the_recording_falls_back_to_the_next_packages_then_to_no_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Packages this machine cannot load (another OS's, an older glibc than the wheels')
    make the build try the next source, and with none left ship no file, not fail."""
    import shutil

    from bench.lambda_layer import load_build_layer

    build_layer = load_build_layer()
    python = lambda_python()
    repo = tmp_path / "repo"
    (repo / "functions" / "one").mkdir(parents=True)
    (repo / "functions" / "one" / "app.py").write_text(RECORDED_APP)
    out = tmp_path / "python"
    shutil.copytree(ROOT / "shared" / "tierq", out / "tierq",
                    ignore=shutil.ignore_patterns("__pycache__"))
    unloadable = tmp_path / "unloadable"  # (no tierq in it: the import fails)
    unloadable.mkdir()

    held = build_layer.record_best_effort(
        repo, out, python, [("the layer", lambda: unloadable), ("a copy", lambda: out)])
    assert held == 2 and (out / "tierq" / "core" / "dataclass_code.marshal").is_file()
    assert "recording the dataclasses' code from the layer failed" in capsys.readouterr().err

    held = build_layer.record_best_effort(repo, out, python,
                                          [("the layer", lambda: unloadable)])
    assert held == 0 and not (out / "tierq" / "core" / "dataclass_code.marshal").exists()
    assert "holds no dataclass code" in capsys.readouterr().err
