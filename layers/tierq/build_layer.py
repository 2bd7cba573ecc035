#!/usr/bin/env python3
"""Build the tierq Lambda layer contents without Docker.

Steps:
1. Build a wheel of the repo's `tierq` package from a temporary copy of the sources (so the
   build leaves no `build/` or `*.egg-info` behind in the work tree).
2. Resolve the full dependency set *for Lambda's platform* (manylinux up to glibc 2.34 on
   the chosen architecture, CPython 3.13, binary wheels only) with
   `pip install --dry-run --report`.
3. Install that exact set, minus the packages the Lambda Python runtime already ships
   (boto3 and friends, see RUNTIME_PROVIDED), with `--no-deps` into `<out>` (`python/` of
   the layer). The set is `[project].dependencies` only: the Lambda runtime's. A package of
   the command line, the client or the local stack in it fails the build (NOT_IN_LAYER).
4. Compile every module to bytecode with a CPython 3.13 interpreter (the runtime's version:
   bytecode of another version is ignored): /opt is read-only, so without it every cold
   start compiles each module it imports. tierq keeps its sources, with unchecked-hash
   .pyc files in __pycache__/ (used whatever the sources' timestamps become in the zip);
   the other packages ship bytecode only (a .pyc in place of each .py, ~9 MB less), plus
   no type stubs or C sources. Their tracebacks then name file and line without the text.
   tierq's bytecode is also written to one file, `tierq/core/module_code.marshal`, from
   which a cold start reads its modules (`tierq.core.module_code`).
5. Import every function (`functions/<name>/app.py`) once with that interpreter, recording
   the methods its dataclasses generate, compiled (`tierq/core/dataclass_code.marshal`):
   a cold start then reads them instead of compiling them (`tierq.core.dataclass_code`).
   The imports run from the layer itself on a Linux machine of the layer's architecture,
   else (or when that fails: an older glibc than the wheels') from a copy of the same
   versions for this machine (the texts depend on the versions only). When neither works,
   the build warns and the layer ships no file: its cold starts compile as before.

Run by layers/tierq/Makefile under `sam build`; can be run by hand too:
    python3 layers/tierq/build_layer.py --repo-root . --out /tmp/layer/python --arch arm64
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

# Lambda runtime python3.13 (template.yaml). The package itself still supports 3.11, the
# Python of Glue 5.0.
PYTHON_VERSION = "3.13"
PLATFORMS = {
    # The python3.13 Lambda runtime runs on Amazon Linux 2023 (glibc 2.34): manylinux wheels
    # up to manylinux_2_34 load there; manylinux2014 (glibc 2.17) is the oldest tag taken.
    "x86_64": ["manylinux_2_34_x86_64", "manylinux_2_28_x86_64", "manylinux2014_x86_64"],
    "arm64": ["manylinux_2_34_aarch64", "manylinux_2_28_aarch64", "manylinux2014_aarch64"],
}
# The AWS SDK itself, shipped by the Lambda python3.13 runtime (in /var/runtime) and needed
# by tierq only through botocore. Leaving it out saves ~35 MB unzipped of the 250 MB
# function+layers limit. Its small dependencies (jmespath, urllib3, python-dateutil) stay in
# the layer: other packages import them directly (Powertools imports jmespath). Remove a
# name here to pin your own copy in the layer instead.
RUNTIME_PROVIDED = {"boto3", "botocore", "s3transfer"}
# Libraries of the command line, the HTTP client and the local stack (extras of tierq):
# the functions never import them, so one in the resolved set means a dependency moved into
# [project].dependencies by mistake.
NOT_IN_LAYER = {
    "typer", "click", "rich", "pygments", "markdown-it-py", "mdurl", "shellingham",
    "httpx", "httpcore", "h11", "anyio", "pyyaml",
}
# Run in each function's folder by the layer's interpreter: the function's import with the
# recorder of tierq.core.dataclass_code on, adding to the file the earlier ones wrote.
RECORDER = """\
from tierq.core import dataclass_code
with dataclass_code.recording({path!r}):
    import app
print(dataclass_code.held({path!r}))
"""
# tierq's modules' bytecode in one file, under tierq/ (tierq.core.module_code), but for
# the subpackages of the command line, the HTTP client and the local stack: no function
# imports them (their libraries are not in the layer)
MODULE_CODE_FILE = "core/module_code.marshal"
NOT_STORED = ("cli", "client", "local")
SOURCE_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def run(cmd: list[str]) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def python_version_of(interpreter: str) -> str | None:
    try:
        done = subprocess.run(
            [interpreter, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, check=False, timeout=60)
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def find_runtime_python(explicit: str | None = None) -> str:
    """A CPython of the Lambda runtime's version (PYTHON_VERSION): ``explicit`` (or
    $TIERQ_LAYER_PYTHON), else python3.13 on PATH, pyenv's, or one uv manages."""
    candidates = [explicit or os.environ.get("TIERQ_LAYER_PYTHON") or ""]
    candidates.append(shutil.which(f"python{PYTHON_VERSION}") or "")
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    pattern = f"versions/{PYTHON_VERSION}*/bin/python{PYTHON_VERSION}"
    candidates += sorted((str(path) for path in pyenv_root.glob(pattern)), reverse=True)
    uv = shutil.which("uv")
    if uv:
        found = subprocess.run([uv, "python", "find", PYTHON_VERSION], capture_output=True,
                               text=True, check=False)
        candidates.append(found.stdout.strip() if found.returncode == 0 else "")
    tried = [candidate for candidate in candidates if candidate]
    for candidate in tried:
        if python_version_of(candidate) == PYTHON_VERSION:
            return candidate
    raise SystemExit(
        f"no Python {PYTHON_VERSION} to compile the layer's bytecode with (tried: "
        f"{', '.join(tried) or 'nothing'}). Install one (e.g. `uv python install "
        f"{PYTHON_VERSION}` or pyenv) or point TIERQ_LAYER_PYTHON / --compile-python at it.")


def python_full_version(interpreter: str) -> str:
    done = subprocess.run([interpreter, "-c", "import platform; print(platform.python_version())"],
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def compile_bytecode(out: Path, interpreter: str) -> int:
    """Bytecode for every module, as the runtime's interpreter looks for it: tierq's in
    __pycache__/ beside its sources (so its tracebacks show their lines), every other
    package's in place of its sources (``compileall -b``, then the .py removed); tierq's
    also in its module store. How many modules the store holds."""
    compileall = [interpreter, "-m", "compileall", "-q", "-j", "0"]
    run([*compileall, "--invalidation-mode", "unchecked-hash", str(out / "tierq")])
    stored = write_module_code(out / "tierq", PYTHON_VERSION)
    print(f"tierq's {stored} modules stored in {MODULE_CODE_FILE}", flush=True)
    others = sorted(
        path for path in out.iterdir()
        if path.name != "tierq" and not path.name.endswith(".dist-info")
        and (path.is_dir() or path.suffix == ".py"))
    run([*compileall, "-b", *map(str, others)])
    for other in others:
        sources = [other] if other.is_file() else list(other.rglob("*.py"))
        for source in sources:
            if source.with_suffix(".pyc").is_file():
                source.unlink()
    return stored


def write_module_code(package_dir: Path, python_version: str) -> int:
    """tierq's bytecode in one file (``tierq.core.module_code``, loaded by path from the
    layer's copy: the build's Python may not import the layer's packages); how many
    modules."""
    spec = importlib.util.spec_from_file_location(
        "tierq_layer_module_code", package_dir / "core" / "module_code.py")
    assert spec is not None and spec.loader is not None
    module_code = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module_code)
    cache_tag = "cpython-" + python_version.replace(".", "")
    count: int = module_code.write(package_dir, cache_tag, package_dir / MODULE_CODE_FILE,
                                   skip=NOT_STORED)
    return count


def drop_build_only_files(out: Path) -> None:
    """Type stubs (.pyi, *-stubs/) and C sources: read by type checkers and compilers, never
    at run time."""
    for path in sorted(out.rglob("*"), reverse=True):
        if path.is_dir() and path.name.endswith("-stubs") and path.parent == out:
            shutil.rmtree(path)
        elif path.is_file() and path.suffix in (".pyi", ".c", ".h"):
            path.unlink()


def platform_args(arch: str) -> list[str]:
    args = []
    for tag in PLATFORMS[arch]:
        args += ["--platform", tag]
    return [
        *args,
        "--python-version",
        PYTHON_VERSION,
        "--implementation",
        "cp",
        "--only-binary=:all:",
    ]


class RecordingFailed(Exception):
    """Step 5 could not import a function from the packages it was given."""


def layer_loads_here(arch: str) -> bool:
    """Whether this machine can import the layer's own packages: Linux, same architecture
    (the glibc may still be too old: the recording then falls back)."""
    machine = platform.machine().lower()
    here = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}.get(
        machine)
    return sys.platform.startswith("linux") and here == arch


def dataclass_code_file(out: Path) -> Path:
    return out / "tierq" / "core" / "dataclass_code.marshal"


def record_dataclass_code(repo_root: Path, out: Path, interpreter: str,
                          packages: Path) -> int:
    """Step 5: every function of ``functions/`` imported from ``packages`` with the recorder
    on; the file lands in the layer's ``tierq/core/``. Answers how many texts it holds;
    raises :class:`RecordingFailed` naming a function that does not import."""
    target = dataclass_code_file(out)
    target.unlink(missing_ok=True)
    held = 0
    for app in sorted((repo_root / "functions").glob("*/app.py")):
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": os.pathsep.join([str(app.parent), str(packages)]),
            "PYTHONDONTWRITEBYTECODE": "1",
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
            "POWERTOOLS_SERVICE_NAME": "tierq",
            "POWERTOOLS_TRACE_DISABLED": "true",
        }
        done = subprocess.run(
            [interpreter, "-S", "-s", "-c", RECORDER.format(path=str(target))],
            env=env, cwd=app.parent, capture_output=True, text=True, check=False, timeout=300)
        if done.returncode != 0:
            target.unlink(missing_ok=True)
            raise RecordingFailed(f"importing {app.parent.name}/app.py to record its "
                                  f"dataclasses failed:\n{done.stderr[-3000:]}")
        held = int(done.stdout.split()[-1])
    return held


def record_best_effort(repo_root: Path, out: Path, interpreter: str,
                       sources: list[tuple[str, Callable[[], Path]]]) -> int:
    """Step 5 from the first of ``sources`` (a label, and what makes its packages' folder)
    that works; 0 and a warning when none does: the layer then ships no file."""
    for label, packages in sources:
        try:
            return record_dataclass_code(repo_root, out, interpreter, packages())
        except (RecordingFailed, subprocess.CalledProcessError) as exc:
            print(f"warning: recording the dataclasses' code from {label} failed: {exc}",
                  file=sys.stderr, flush=True)
    dataclass_code_file(out).unlink(missing_ok=True)
    print("warning: the layer holds no dataclass code; its cold starts compile the "
          "dataclasses' methods as before", file=sys.stderr, flush=True)
    return 0


def build_wheel(repo_root: Path, work: Path) -> Path:
    src = work / "src"
    src.mkdir()
    shutil.copy2(repo_root / "pyproject.toml", src / "pyproject.toml")
    for extra in ("README.md", "LICENSE"):
        if (repo_root / extra).is_file():
            shutil.copy2(repo_root / extra, src / extra)
    if not (src / "README.md").exists():
        # pyproject.toml names README.md as the readme; a placeholder keeps the build going
        # while the real one is being written.
        (src / "README.md").write_text("tierq\n")
    shutil.copytree(repo_root / "shared" / "tierq", src / "shared" / "tierq", ignore=SOURCE_IGNORE)
    wheels = work / "wheels"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(wheels), str(src)])
    (wheel,) = wheels.glob("tierq-*.whl")
    return wheel


def resolve(wheel: Path, arch: str, work: Path) -> list[str]:
    report = work / "report.json"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed"]
    target = ["--target", str(work / "dry-run"), "--report", str(report)]
    run([*pip, *target, *platform_args(arch), str(wheel)])
    pins = []
    for item in json.loads(report.read_text())["install"]:
        meta = item["metadata"]
        name = canonical(meta["name"])
        if name == "tierq" or name in RUNTIME_PROVIDED:
            continue
        pins.append(f"{name}=={meta['version']}")
    unwanted = sorted(pin.split("==")[0] for pin in pins if pin.split("==")[0] in NOT_IN_LAYER)
    if unwanted:
        raise SystemExit(
            f"the layer would carry {', '.join(unwanted)}: libraries of the command line, the "
            "client or the local stack, which belong in extras of pyproject.toml, not in "
            "[project].dependencies")
    return sorted(pins)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo-root", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="the layer's python/ dir")
    parser.add_argument("--arch", choices=sorted(PLATFORMS), required=True)
    parser.add_argument("--compile-python",
                        help=f"a CPython {PYTHON_VERSION} to compile the bytecode with "
                             "(default: $TIERQ_LAYER_PYTHON, python3.13 on PATH, pyenv, uv)")
    args = parser.parse_args()

    repo_root = args.repo_root.resolve()
    out = args.out.resolve()
    # Found first: a build without it would fail only after the downloads.
    compiler = find_runtime_python(args.compile_python)
    with tempfile.TemporaryDirectory(prefix="tierq-layer-") as tmp:
        work = Path(tmp)
        wheel = build_wheel(repo_root, work)
        pins = resolve(wheel, args.arch, work)
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile"]
        run([*pip, "--target", str(out), *platform_args(args.arch), str(wheel), *pins])
        # Console scripts carry this machine's interpreter path in their shebang: useless in
        # a layer (Lambda only imports from python/).
        shutil.rmtree(out / "bin", ignore_errors=True)
        drop_build_only_files(out)
        stored_modules = compile_bytecode(out, compiler)

        def native_copy() -> Path:
            """The same versions for this machine (pip's own platform), in the work folder."""
            native = work / "native"
            run([*pip, "--target", str(native), "--python-version", PYTHON_VERSION,
                 "--implementation", "cp", "--only-binary=:all:", str(wheel), *pins])
            return native

        sources: list[tuple[str, Callable[[], Path]]] = []
        if layer_loads_here(args.arch):
            sources.append(("the layer", lambda: out))
        sources.append(("a copy of its packages for this machine", native_copy))
        recorded = record_best_effort(repo_root, out, compiler, sources)
    (out / "tierq_layer.json").write_text(
        json.dumps(
            {
                "arch": args.arch,
                "python": PYTHON_VERSION,
                "bytecode": f"cpython {python_full_version(compiler)}, unchecked-hash",
                "packages": ["tierq", *pins],
                "left_to_runtime": sorted(RUNTIME_PROVIDED),
                "dataclass_code": recorded,
                "module_code": stored_modules,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"layer python/ ready: {out} ({len(pins) + 1} distributions, arch {args.arch})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
