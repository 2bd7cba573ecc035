"""The peers' environment: ``.local/bench-peers-venv`` with the packages of
``requirements.txt``, made when missing and made again when the requirements change.

    .venv/bin/python -m bench.peers.venv    # make it now; prints its interpreter
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from bench.report import say

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = Path(__file__).with_name("requirements.txt")
PEERS_VENV = ROOT / ".local" / "bench-peers-venv"
INSTALL_TIMEOUT = 900.0


def wanted_stamp() -> str:
    """What the environment is made of: the requirements and the Python they are for."""
    digest = hashlib.sha256(REQUIREMENTS.read_bytes())
    digest.update(f"{sys.version_info.major}.{sys.version_info.minor}".encode())
    return digest.hexdigest()


@contextlib.contextmanager
def locked(venv: Path) -> Iterator[None]:
    """One process at a time makes the environment (parallel test sessions share it)."""
    venv.parent.mkdir(parents=True, exist_ok=True)
    with venv.with_name(venv.name + ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def run_logged(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False,
                          timeout=INSTALL_TIMEOUT)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n"
                           f"{done.stdout[-2000:]}{done.stderr[-2000:]}")


def peer_python(venv: Path = PEERS_VENV) -> Path:
    """The peers' interpreter; the environment is made (about half a minute) first when it
    is missing or was made from other requirements."""
    python = venv / "bin" / "python"
    stamp = venv / ".requirements-sha256"
    want = wanted_stamp()
    with locked(venv):
        if python.exists() and stamp.exists() and stamp.read_text() == want:
            return python
        say(f"making the peers' environment {venv} from {REQUIREMENTS.relative_to(ROOT)} …")
        shutil.rmtree(venv, ignore_errors=True)
        run_logged([sys.executable, "-m", "venv", str(venv)])
        run_logged([str(python), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)])
        stamp.write_text(want)
    return python


if __name__ == "__main__":
    print(peer_python())
