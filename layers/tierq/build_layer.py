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
   the layer).

Run by layers/tierq/Makefile under `sam build`; can be run by hand too:
    python3 layers/tierq/build_layer.py --repo-root . --out /tmp/layer/python --arch arm64
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
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
SOURCE_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def run(cmd: list[str]) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


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
    return sorted(pins)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo-root", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="the layer's python/ dir")
    parser.add_argument("--arch", choices=sorted(PLATFORMS), required=True)
    args = parser.parse_args()

    repo_root = args.repo_root.resolve()
    out = args.out.resolve()
    with tempfile.TemporaryDirectory(prefix="tierq-layer-") as tmp:
        work = Path(tmp)
        wheel = build_wheel(repo_root, work)
        pins = resolve(wheel, args.arch, work)
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile"]
        run([*pip, "--target", str(out), *platform_args(args.arch), str(wheel), *pins])
    # Console scripts carry this machine's interpreter path in their shebang: useless in a
    # layer (Lambda only imports from python/).
    shutil.rmtree(out / "bin", ignore_errors=True)
    (out / "tierq_layer.json").write_text(
        json.dumps(
            {
                "arch": args.arch,
                "python": PYTHON_VERSION,
                "packages": ["tierq", *pins],
                "left_to_runtime": sorted(RUNTIME_PROVIDED),
            },
            indent=2,
        )
        + "\n"
    )
    print(f"layer python/ ready: {out} ({len(pins) + 1} distributions, arch {args.arch})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
