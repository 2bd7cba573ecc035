"""The Glue job runs only pinned packages shipped with its artifacts: ``requirements-glue.txt``
pins everything tierq needs with a hash, and the zip of wheels ``build_modules.py`` makes
installs into a fresh environment with no index and no network at all.

No network here: the third-party wheels are made from this environment's installed
distributions (tests/support/wheels.py: the versions the suite runs against, on the same
CPython 3.11 and x86_64 as Glue 5.0), the tierq wheel from the sources, both by the build
script's own functions; the install runs in a network namespace of its own when the machine
allows one (``unshare -n``), and with pip's configuration and indexes off either way."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import build_modules
import pytest
import yaml

from tests.support.template import REPO, TEMPLATE, CfnLoader
from tests.support.wheels import canonical, closure, repack


def tierq_requirements() -> list[str]:
    return list(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"])


def test_the_lock_pins_every_package_tierq_needs_with_its_hash() -> None:
    pins = build_modules.read_lock()
    assert pins, "requirements-glue.txt pins nothing"
    for pin in pins:
        assert pin.hashes and all(len(h) == 64 for h in pin.hashes), pin
    needed = {name for name in closure(tierq_requirements())
              if name not in build_modules.GLUE_PROVIDED}
    assert {p.name for p in pins} == needed


def test_the_lock_pins_the_versions_the_suite_runs_against() -> None:
    installed = closure(tierq_requirements())
    stale = {p.name: (p.version, installed[p.name]) for p in build_modules.read_lock()
             if installed.get(p.name) != p.version}
    assert not stale, (f"requirements-glue.txt pins other versions than this environment's "
                       f"{stale}: run `python spark_glue/build_modules.py lock`")


def test_a_wheel_that_is_not_the_pinned_one_is_refused(tmp_path: Path) -> None:
    wheel = repack("six", tmp_path / "wheels")
    name, version = build_modules.wheel_name_version(wheel)
    good = build_modules.Pin(name, version, (build_modules.sha256_of(wheel),))
    build_modules.check_wheels([wheel], [good])
    other = build_modules.Pin(name, version, ("0" * 64,))
    with pytest.raises(ValueError, match="is not the pinned six"):
        build_modules.check_wheels([wheel], [other])
    with pytest.raises(ValueError, match="no wheel for"):
        build_modules.check_wheels([], [good])


def _offline() -> list[str]:
    """A prefix that runs a command without any network, where the machine allows it."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-n", "true"], capture_output=True).returncode == 0:
        return [unshare, "-n"]
    return []


@pytest.mark.slow
def test_the_zip_of_wheels_installs_with_no_index_into_a_fresh_environment(
        tmp_path: Path) -> None:
    wheels = [repack(pin.name, tmp_path / "wheels") for pin in build_modules.read_lock()]
    wheels.append(build_modules.build_tierq_wheel(REPO, tmp_path / "tierq"))
    made = build_modules.make_modules_zip(tmp_path / build_modules.MODULES_ZIP, wheels)
    with zipfile.ZipFile(made) as archive:
        names = archive.namelist()
        archive.extractall(tmp_path / "unpacked")
    assert sorted(names) == sorted(f"wheels/{name}" for name in
                                   [w.name for w in wheels] + ["requirements.txt"])
    unpacked = tmp_path / "unpacked" / "wheels"
    requirements = (unpacked / "requirements.txt").read_text()
    assert "tierq==0.1.0" in requirements and requirements.count("--hash=sha256:") == len(wheels)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path),
           "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_CACHE_DIR": "1"}
    # what Glue's Python already has that tierq's packages need: the AWS SDK and its own
    provided = [repack(name, tmp_path / "glue") for name in sorted(build_modules.GLUE_PROVIDED)]
    subprocess.run([*_offline(), python, "-m", "pip", "install", "--no-index", "--no-deps",
                    *map(str, provided)], env=env, capture_output=True, check=True, timeout=300)
    install = subprocess.run(
        [*_offline(), python, "-m", "pip", "install", "--no-index", "--require-hashes",
         "--find-links", str(unpacked), "-r", str(unpacked / "requirements.txt")],
        env=env, capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    listed = subprocess.run([python, "-m", "pip", "list", "--format=json"], env=env,
                            capture_output=True, text=True, check=True).stdout
    installed = {canonical(item["name"]) for item in json.loads(listed)}
    assert installed - {"pip", "setuptools", "wheel"} == {
        build_modules.wheel_name_version(w)[0] for w in wheels} | build_modules.GLUE_PROVIDED
    # what the job imports (the feeder's own package comes as --extra-py-files)
    imports = subprocess.run(
        [*_offline(), python, "-c",
         "import tierq.engine, tierq.sharded, tierq.logic.bulk, tierq.logic.feed, "
         "tierq.dal.valkey_auth, psycopg, redis, hiredis, orjson, pydantic, croniter; "
         "from psycopg import pq; assert pq.__impl__ == 'binary', pq.__impl__"],
        env=env, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert imports.returncode == 0, imports.stderr


def test_the_job_installs_the_zip_without_an_index() -> None:
    template = yaml.load(TEMPLATE.read_text(), Loader=CfnLoader)
    job = template["Resources"]["FeedQueueJob"]["Properties"]["DefaultArguments"]
    assert job["--additional-python-modules"] == {
        "Fn::Sub": "s3://${GlueArtifactsBucket}/${GlueModulesZipKey}"}
    assert job["--python-modules-installer-option"] == "--no-index"
    key = template["Parameters"]["GlueModulesZipKey"]["Default"]
    assert key.endswith("/" + build_modules.MODULES_ZIP)
    assert re.fullmatch(template["Parameters"]["GlueModulesZipKey"]["AllowedPattern"], key)
    assert not re.fullmatch(template["Parameters"]["GlueModulesZipKey"]["AllowedPattern"],
                            "glue/tierq_glue_modules.zip")
    # nothing unpinned is named anywhere any more
    assert "GluePythonModules" not in template["Parameters"]
    assert "GlueTierqWheelKey" not in template["Parameters"]


def test_the_modules_zip_has_glues_documented_name_and_layout(tmp_path: Path) -> None:
    """AWS Glue's form of a zip of wheels for ``--additional-python-modules`` ("Using Python
    libraries with AWS Glue", its zip-of-wheels section and Appendix A): a file named
    ``*.gluewheels.zip`` (without the suffix Glue takes the object for one module to
    pip-install), made as ``zip -r <name>.gluewheels.zip wheels/`` with the wheels and
    requirements.txt in ``wheels/``."""
    assert build_modules.MODULES_ZIP.endswith(".gluewheels.zip"), build_modules.MODULES_ZIP
    template = yaml.load(TEMPLATE.read_text(), Loader=CfnLoader)
    key = template["Parameters"]["GlueModulesZipKey"]["Default"]
    assert key.endswith(".gluewheels.zip"), key
    wheels = [repack("six", tmp_path / "w"), build_modules.build_tierq_wheel(REPO, tmp_path / "t")]
    made = build_modules.make_modules_zip(tmp_path / build_modules.MODULES_ZIP, wheels)
    with zipfile.ZipFile(made) as archive:
        names = archive.namelist()
    assert all(name.startswith("wheels/") for name in names), names
    assert "wheels/requirements.txt" in names
    with pytest.raises(ValueError, match="gluewheels"):
        build_modules.make_modules_zip(tmp_path / "modules.zip", wheels)


def test_what_glue_provides_is_left_out_of_the_lock_with_the_sdk() -> None:
    """Glue 5.0's own packages are used as Glue has them, all alike: the SDK that tierq
    does not pin, and the SDK's own dependencies, which tierq's packages need too."""
    pinned = {pin.name for pin in build_modules.read_lock()}
    assert not pinned & build_modules.GLUE_PROVIDED
    sdk = closure(["boto3"])
    assert set(sdk) <= build_modules.GLUE_PROVIDED, set(sdk) - build_modules.GLUE_PROVIDED
