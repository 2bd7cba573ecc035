#!/usr/bin/env python3
"""Build the Glue job's artifacts: the zip of wheels it installs without an index, the
feeder's modules and the entry point.

The job holds the database's application login and reaches the cache, so it runs only
pinned packages shipped with its artifacts: nothing is fetched from a package index when
it starts. ``requirements-glue.txt`` (next to this script) pins every third-party package
tierq needs, for Glue 5.0's Python (CPython 3.11, manylinux x86_64), each with the sha256
of its wheel.

    python spark_glue/build_modules.py lock              # (network) re-pin, from this venv
    python spark_glue/build_modules.py build --out dist/glue   # (network) the artifacts

``lock`` resolves tierq's ``[project].dependencies`` for Glue's platform with the versions
installed in the environment that runs it (the versions the test suite ran against), then
downloads each wheel to hash it. ``build`` downloads exactly the pinned wheels with pip's
``--require-hashes`` (a wheel whose hash differs is refused), builds the tierq wheel from
``shared/tierq`` (pure Python, no build backend), and writes into ``--out``:

| file | the job's argument | holds |
| --- | --- | --- |
| ``tierq.gluewheels.zip`` | ``--additional-python-modules`` | ``wheels/``: the wheels, a lock |
| ``tierq_feeder.zip`` | ``--extra-py-files`` | ``spark_glue/tierq_feeder`` |
| ``feed_queue.py`` | the script | ``spark_glue/jobs/feed_queue.py`` |

The modules zip has the form AWS Glue documents for a zip of wheels ("Using Python libraries
with AWS Glue", Glue 5.0 and later, and its Appendix A): a name ending in
``.gluewheels.zip`` (without it Glue takes the object for one module to pip-install), the
wheels and a ``requirements.txt`` inside a folder ``wheels/``. It is installed with
``--python-modules-installer-option --no-index``; ``requirements.txt`` pins each of its
wheels (tierq's too) with its sha256.

What Glue 5.0's Python already has is left out of the lock (``GLUE_PROVIDED``): the AWS SDK
and the packages it needs itself, which tierq's packages need too. With ``--no-index`` a
requirement Glue's copy does not meet stops the install (the job fails to start) instead of
fetching anything.

``--wheelhouse DIR`` takes the third-party wheels from DIR instead of downloading them
(each must match its pinned hash; nothing is fetched).
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
LOCK = HERE / "requirements-glue.txt"
MODULES_ZIP = "tierq.gluewheels.zip"  # (the suffix Glue looks for)
WHEELS_DIR = "wheels"  # the folder of the zip that holds the wheels and requirements.txt
FEEDER_ZIP = "tierq_feeder.zip"
ENTRY_POINT = "feed_queue.py"
# Glue 5.0: Amazon Linux 2023 (glibc 2.34), CPython 3.11, x86_64 workers.
PYTHON_VERSION = "3.11"
PLATFORMS = ("manylinux_2_34_x86_64", "manylinux_2_28_x86_64", "manylinux2014_x86_64")
# What Glue 5.0's Python environment provides: left out of the lock and used as Glue has
# it (a zip of wheels that pinned them would replace Glue's own copies).
#
# | package                     | whose                                                      |
# | --------------------------- | ---------------------------------------------------------- |
# | boto3, botocore, s3transfer | the AWS SDK; tierq uses botocore through Powertools, to    |
# |                             | fetch a secret, and to sign the cache's IAM tokens         |
# | jmespath                    | the SDK's; Powertools needs it too (>= 1.0.1)              |
# | python-dateutil, six        | botocore's; croniter needs python-dateutil                 |
# | urllib3                     | botocore's (nothing else of tierq's)                       |
# | tzdata                      | tierq's own (IANA zones for schedules), pandas' on Glue    |
GLUE_PROVIDED = frozenset({"boto3", "botocore", "s3transfer", "jmespath", "python-dateutil",
                           "six", "urllib3", "tzdata"})
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    hashes: tuple[str, ...]

    def line(self) -> str:
        hashes = "".join(f" \\\n    --hash=sha256:{h}" for h in self.hashes)
        return f"{self.name}=={self.version}{hashes}"


def read_lock(path: Path = LOCK) -> list[Pin]:
    """The pins of a requirements file written by ``lock`` (``name==version`` and its
    ``--hash=sha256:`` options, continued with backslashes)."""
    text = re.sub(r"\\\n", " ", path.read_text())
    pins = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _PIN.match(line)
        if match is None:
            raise ValueError(f"{path}: not a pin: {raw.strip()!r}")
        pins.append(Pin(canonical(match[1]), match[2], tuple(_HASH.findall(line))))
    return pins


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def platform_args() -> list[str]:
    args = ["--only-binary=:all:", "--python-version", PYTHON_VERSION,
            "--implementation", "cp"]
    for platform in PLATFORMS:
        args += ["--platform", platform]
    return args


def run(cmd: Sequence[str]) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(list(cmd), check=True)


# ----------------------------------------------------------------------- the tierq wheel


def _record_line(name: str, data: bytes) -> list[str]:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [name, f"sha256={digest}", str(len(data))]


def write_wheel(path: Path, files: Iterable[tuple[str, bytes]], dist_info: str) -> Path:
    """A wheel at ``path`` of ``files`` (archive name, content) plus its RECORD."""
    records: list[list[str]] = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files:
            archive.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), data,
                             zipfile.ZIP_DEFLATED)
            records.append(_record_line(name, data))
        record = f"{dist_info}/RECORD"
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerows([*records, [record, "", ""]])
        archive.writestr(zipfile.ZipInfo(record, date_time=(2020, 1, 1, 0, 0, 0)),
                         out.getvalue(), zipfile.ZIP_DEFLATED)
    return path


def build_tierq_wheel(repo: Path, out: Path) -> Path:
    """``tierq-<version>-py3-none-any.whl`` of ``shared/tierq`` (every file but bytecode)
    with the metadata of ``pyproject.toml`` (its runtime dependencies): pure Python, so no
    build backend is needed; the same sources always give the same bytes."""
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    name, version = project["name"], project["version"]
    dist_info = f"{name}-{version}.dist-info"
    metadata = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
                f"Summary: {project.get('description', '')}",
                f"Requires-Python: {project.get('requires-python', '')}",
                *(f"Requires-Dist: {dep}" for dep in project.get("dependencies", []))]
    wheel_meta = ["Wheel-Version: 1.0", "Generator: tierq spark_glue/build_modules.py",
                  "Root-Is-Purelib: true", "Tag: py3-none-any"]
    package = repo / "shared" / "tierq"
    files = [(path.relative_to(repo / "shared").as_posix(), path.read_bytes())
             for path in sorted(package.rglob("*"))
             if path.is_file() and "__pycache__" not in path.parts
             and path.suffix not in (".pyc", ".pyo")]
    files += [(f"{dist_info}/METADATA", ("\n".join(metadata) + "\n").encode()),
              (f"{dist_info}/WHEEL", ("\n".join(wheel_meta) + "\n").encode()),
              (f"{dist_info}/top_level.txt", b"tierq\n")]
    out.mkdir(parents=True, exist_ok=True)
    return write_wheel(out / f"{name}-{version}-py3-none-any.whl", files, dist_info)


# ----------------------------------------------------------------------- the artifacts


def wheel_name_version(path: Path) -> tuple[str, str]:
    name, version = path.name.split("-")[:2]
    return canonical(name), version


def check_wheels(wheels: Sequence[Path], pins: Sequence[Pin]) -> None:
    """Every pin has exactly one wheel, of its version and one of its hashes; no other."""
    by_name = {p.name: p for p in pins}
    found: dict[str, Path] = {}
    for wheel in wheels:
        name, version = wheel_name_version(wheel)
        pin = by_name.get(name)
        if pin is None:
            raise ValueError(f"{wheel.name} is not pinned in {LOCK.name}")
        if version != pin.version or sha256_of(wheel) not in pin.hashes:
            raise ValueError(f"{wheel.name} is not the pinned {pin.name}=={pin.version} "
                             "(version or sha256 differs)")
        found[name] = wheel
    missing = sorted(set(by_name) - set(found))
    if missing:
        raise ValueError(f"no wheel for {', '.join(missing)}")


def make_modules_zip(out: Path, wheels: Sequence[Path]) -> Path:
    """The zip of wheels at ``out`` (its name must end in ``.gluewheels.zip``): in the
    folder ``wheels/``, each wheel and ``requirements.txt`` pinning each one's version and
    sha256 (tierq's too), for an install without an index."""
    if not out.name.endswith(".gluewheels.zip"):
        raise ValueError(f"{out.name}: Glue takes a zip of wheels only by the suffix "
                         "'.gluewheels.zip'")
    lines = []
    for wheel in sorted(wheels, key=lambda w: w.name):
        name, version = wheel_name_version(wheel)
        lines.append(Pin(name, version, (sha256_of(wheel),)).line())
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for wheel in sorted(wheels, key=lambda w: w.name):
            archive.write(wheel, f"{WHEELS_DIR}/{wheel.name}")
        archive.writestr(f"{WHEELS_DIR}/requirements.txt", "\n".join(lines) + "\n")
    return out


def make_feeder_zip(out: Path) -> Path:
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted((HERE / "tierq_feeder").rglob("*.py")):
            archive.write(path, path.relative_to(HERE).as_posix())
    return out


def download_pinned(pins: Sequence[Pin], into: Path) -> list[Path]:
    """The pinned wheels for Glue's platform, each checked against its hashes by pip."""
    with tempfile.TemporaryDirectory() as scratch:
        requirements = Path(scratch) / "requirements.txt"
        requirements.write_text("\n".join(p.line() for p in pins) + "\n")
        run([sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes",
             *platform_args(), "-r", str(requirements), "-d", str(into)])
    return sorted(into.glob("*.whl"))


def build(out: Path, *, wheelhouse: Path | None = None) -> dict[str, Path]:
    """Every artifact of the job into ``out`` (see the module's documentation)."""
    pins = read_lock()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        third = Path(scratch) / "third-party"
        third.mkdir()
        if wheelhouse is None:
            wheels = download_pinned(pins, third)
        else:
            names = {p.name for p in pins}
            wheels = [w for w in sorted(wheelhouse.glob("*.whl"))
                      if wheel_name_version(w)[0] in names]
        check_wheels(wheels, pins)
        tierq_wheel = build_tierq_wheel(REPO, Path(scratch) / "tierq")
        made = {"modules": make_modules_zip(out / MODULES_ZIP, [*wheels, tierq_wheel])}
    made["feeder"] = make_feeder_zip(out / FEEDER_ZIP)
    made["script"] = Path(shutil.copy2(HERE / "jobs" / "feed_queue.py", out / ENTRY_POINT))
    return made


# ----------------------------------------------------------------------- the lock


def resolve(scratch: Path) -> list[tuple[str, str]]:
    """(name, version) of every third-party package tierq needs on Glue's platform, at the
    versions installed here (constraints), by pip's resolver."""
    from importlib import metadata

    tierq_wheel = build_tierq_wheel(REPO, scratch / "tierq")
    constraints = scratch / "constraints.txt"
    constraints.write_text("".join(f"{d.metadata['Name']}=={d.version}\n"
                                   for d in metadata.distributions()
                                   if canonical(d.metadata["Name"]) != "tierq"))
    report = scratch / "report.json"
    run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
         "--quiet", "--report", str(report), "--target", str(scratch / "target"),
         *platform_args(), "-c", str(constraints), str(tierq_wheel)])
    installs = json.loads(report.read_text())["install"]
    found = [(canonical(i["metadata"]["name"]), i["metadata"]["version"]) for i in installs]
    return sorted((n, v) for n, v in found if n != "tierq" and n not in GLUE_PROVIDED)


def lock(path: Path = LOCK) -> list[Pin]:
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        pins = []
        wheels = scratch / "wheels"
        for name, version in resolve(scratch):
            run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                 *platform_args(), f"{name}=={version}", "-d", str(wheels)])
            [wheel] = [w for w in wheels.glob("*.whl") if wheel_name_version(w) ==
                       (name, version)]
            pins.append(Pin(name, version, (sha256_of(wheel),)))
    header = ("# The Glue job's third-party packages (CPython 3.11, manylinux x86_64), pinned\n"
              "# with their wheels' sha256: written by `python spark_glue/build_modules.py "
              "lock`\n# from the versions installed in the project's environment; edit by "
              "running it again.\n")
    path.write_text(header + "\n".join(p.line() for p in pins) + "\n")
    return pins


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("lock", help=f"re-pin {LOCK.name} (needs the package index)")
    make = commands.add_parser("build", help="the job's artifacts")
    make.add_argument("--out", type=Path, default=REPO / "dist" / "glue")
    make.add_argument("--wheelhouse", type=Path, default=None,
                      help="take the pinned wheels from here instead of downloading them")
    args = parser.parse_args(argv)
    if args.command == "lock":
        pins = lock()
        print(f"pinned {len(pins)} packages in {LOCK}")
        return 0
    for what, path in build(args.out, wheelhouse=args.wheelhouse).items():
        print(f"{what}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
