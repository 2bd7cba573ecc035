"""Finding the servers' binaries, installing them with apt-get when we may, and the system
user PostgreSQL runs as when we are root."""

from __future__ import annotations

import fcntl
import os
import pwd
import re
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tierq.local.services.process import LocalServicesError, run, say, which


@dataclass(frozen=True)
class RunAs:
    """A system user to run PostgreSQL's tools as (we are root, PostgreSQL refuses root)."""

    name: str
    uid: int
    gid: int

    def wrap(self, cmd: Sequence[str]) -> list[str]:
        runuser = which("runuser")
        if runuser:
            return [str(runuser), "-u", self.name, "--", *cmd]
        setpriv = which("setpriv")
        if setpriv:
            return [
                str(setpriv),
                f"--reuid={self.uid}",
                f"--regid={self.gid}",
                "--init-groups",
                "--",
                *cmd,
            ]
        raise LocalServicesError(
            "need `runuser` or `setpriv` (util-linux) to run PostgreSQL as user "
            f"{self.name!r} while we are root"
        )

    def chown(self, path: Path) -> None:
        os.chown(path, self.uid, self.gid)


def is_debian_root() -> bool:
    return (
        os.geteuid() == 0 and Path("/etc/debian_version").exists() and which("apt-get") is not None
    )


# Held while apt-get runs: several processes that start servers at once (the test suite's
# parallel workers) would otherwise each run apt-get and fail on dpkg's own lock; the later
# ones wait, then find the packages installed (apt-get returns at once).
APT_LOCK = Path("/tmp/tierq-apt-install.lock")


def apt_install(packages: Sequence[str]) -> None:
    """Non-interactive ``apt-get install``, one process at a time (``APT_LOCK``); runs
    ``apt-get update`` and retries on failure."""
    with APT_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _apt_install(packages)


def _apt_install(packages: Sequence[str]) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = [
        "apt-get",
        "install",
        "-y",
        "--no-install-recommends",
        "-o",
        "Dpkg::Options::=--force-confdef",
        "-o",
        "Dpkg::Options::=--force-confold",
        *packages,
    ]
    names = " ".join(packages)
    say(f"installing {names} with apt-get (can take a minute or more)...")
    started = time.monotonic()
    code, _ = run(cmd, what=f"apt-get install {names}", check=False, env=env, timeout=1800)
    if code != 0:
        say("apt-get install failed; running apt-get update and retrying...")
        run(["apt-get", "update"], what="apt-get update", env=env, timeout=900)
        run(cmd, what=f"apt-get install {names}", env=env, timeout=1800)
    say(f"installed {names} in {time.monotonic() - started:.0f}s")



@dataclass(frozen=True)
class PgBinaries:
    bindir: Path
    major: int

    @property
    def initdb(self) -> Path:
        return self.bindir / "initdb"

    @property
    def pg_ctl(self) -> Path:
        return self.bindir / "pg_ctl"

    @property
    def postgres(self) -> Path:
        return self.bindir / "postgres"

    @property
    def complete(self) -> bool:
        return all(os.access(p, os.X_OK) for p in (self.initdb, self.pg_ctl, self.postgres))


def _version_key(path: Path) -> tuple[int, ...]:
    numbers = re.findall(r"\d+", path.name)
    return tuple(int(n) for n in numbers) or (0,)


def _pg_major(bindir: Path) -> int | None:
    code, out = run([bindir / "pg_ctl", "--version"], what="pg_ctl --version", check=False)
    match = re.search(r"(\d+)(?:\.\d+)?", out)
    return int(match.group(1)) if code == 0 and match else None


def find_pg_binaries(prefer_major: int | None = None) -> PgBinaries | None:
    """PostgreSQL server binaries: /usr/lib/postgresql/<newest>/bin, then PATH.

    When ``prefer_major`` is given (an existing data directory's version) and binaries of
    that major version exist, those win.
    """
    found: list[PgBinaries] = []
    for pattern_root, glob in ((Path("/usr/lib/postgresql"), "*"), (Path("/usr"), "pgsql-*")):
        if not pattern_root.is_dir():
            continue
        versioned = [d for d in pattern_root.glob(glob) if (d / "bin").is_dir()]
        for directory in sorted(versioned, key=_version_key, reverse=True):
            major = _version_key(directory)[0]
            bins = PgBinaries(directory / "bin", major)
            if bins.complete:
                found.append(bins)
    on_path = which("pg_ctl")
    if on_path is not None:
        bindir = on_path.resolve().parent
        if all(b.bindir != bindir for b in found):
            path_major = _pg_major(bindir)
            if path_major is not None:
                bins = PgBinaries(bindir, path_major)
                if bins.complete:
                    found.append(bins)
    if not found:
        return None
    if prefer_major is not None:
        for bins in found:
            if bins.major == prefer_major:
                return bins
    return found[0]


def find_valkey_binary() -> Path | None:
    for name in ("valkey-server", "redis-server"):
        found = which(name, ("/usr/bin", "/usr/local/bin", "/opt/homebrew/bin"))
        if found is not None:
            return found
    return None


def require_valkey_binary() -> Path:
    """valkey-server or redis-server, installed with apt-get when missing and allowed."""
    found = find_valkey_binary()
    if found is None:
        if not is_debian_root():
            raise LocalServicesError(
                "neither valkey-server nor redis-server found on PATH. Install one "
                "(Debian/Ubuntu: `sudo apt-get install redis-server`; macOS: `brew "
                "install valkey`; Fedora: `sudo dnf install valkey`), or set "
                "VALKEY_URL to a server that answers."
            )
        apt_install(["redis-server"])
        found = find_valkey_binary()
        if found is None:
            raise LocalServicesError("installed redis-server but still no binary found")
    return found


def ensure_system_user(name: str) -> RunAs:
    """The system user `name`, created (no login, no home) when missing."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        say(f"creating system user {name!r} (PostgreSQL refuses to run as root)...")
        useradd = which("useradd")
        adduser = which("adduser")
        if useradd:
            cmd = [
                str(useradd),
                "--system",
                "--user-group",
                "--no-create-home",
                "--home-dir",
                "/var/lib/postgresql",
                "--shell",
                "/usr/sbin/nologin",
                name,
            ]
        elif adduser:
            cmd = [str(adduser), "--system", "--group", "--no-create-home", name]
        else:
            raise LocalServicesError(
                f"PostgreSQL cannot run as root and there is no user {name!r}; "
                "create one (useradd --system postgres) or run as a normal user"
            ) from None
        run(cmd, what=f"create user {name}")
        entry = pwd.getpwnam(name)
    return RunAs(entry.pw_name, entry.pw_uid, entry.pw_gid)


def check_reachable(path: Path, user: RunAs) -> None:
    """Fail clearly when `user` cannot traverse every directory above `path`."""
    groups = set(os.getgrouplist(user.name, user.gid))
    for directory in reversed((path, *path.parents)):
        info = directory.stat()
        if info.st_uid == user.uid:
            bit = stat.S_IXUSR
        elif info.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            raise LocalServicesError(
                f"PostgreSQL runs as user {user.name!r} (we are root), and that user cannot "
                f"enter {directory} (mode {stat.filemode(info.st_mode)}). Use a state dir "
                f"whose parents are searchable (e.g. under /tmp with mode 755), or run "
                f"`chmod o+x {directory}`."
            )


def chown_tree(root: Path, user: RunAs) -> None:
    user.chown(root)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            os.chown(Path(dirpath) / name, user.uid, user.gid, follow_symlinks=False)
