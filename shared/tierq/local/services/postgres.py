"""A private PostgreSQL cluster in ``<state>/postgres``, run by pg_ctl (as the ``postgres``
system user when we are root: PostgreSQL refuses to run as root). Its data directory is kept
across runs (``initdb`` happens once)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psycopg
from psycopg import sql

from tierq.local.services.install import (
    PgBinaries,
    RunAs,
    apt_install,
    check_reachable,
    chown_tree,
    ensure_system_user,
    find_pg_binaries,
    is_debian_root,
)
from tierq.local.services.process import (
    STOP_TIMEOUT,
    Kind,
    LocalServicesError,
    log_tail,
    make_dirs,
    pid_alive,
    proc_cmdline,
    read_int_line,
    run,
    say,
)
from tierq.local.services.server import PrivateService

PG_SUPERUSER = "postgres"
PG_DATABASE = "tierq"
PG_SYSTEM_USER = "postgres"
# sun_path is 108 bytes including the NUL; postgres appends "/.s.PGSQL.<port>".
_MAX_SOCKET_DIR_LEN = 107 - len("/.s.PGSQL.65535") - len(".lock")


class PrivatePostgres(PrivateService):
    """A PostgreSQL cluster in ``<state>/postgres``, run by pg_ctl (as user postgres if root)."""

    kind: Kind = "postgres"

    def __init__(self, state_dir: Path) -> None:
        super().__init__(state_dir)
        self.root = state_dir / "postgres"
        self.data_dir = self.root / "data"
        self.log_file = self.root / "server.log"
        self.port = self._running_port()
        self._bins: PgBinaries | None = None
        self._run_as: RunAs | None = None

    # -- addresses

    @property
    def url(self) -> str:
        return self.url_for(PG_DATABASE)

    def url_for(self, database: str) -> str:
        port = self.port if self.port is not None else self._saved_port()
        return f"postgresql://{PG_SUPERUSER}@127.0.0.1:{port}/{database}"

    @property
    def socket_dir(self) -> Path:
        preferred = self.root / "run"
        if len(os.fsencode(preferred)) <= _MAX_SOCKET_DIR_LEN:
            return preferred
        # Too long for a unix socket path: a short, stable directory keyed by the state dir.
        digest = hashlib.sha1(os.fsencode(self.root.resolve())).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"tierq-pg-{digest}"

    # -- process

    @property
    def pid(self) -> int | None:
        pid = read_int_line(self.data_dir / "postmaster.pid")
        if pid is None or not pid_alive(pid):
            return None
        try:
            cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
        except FileNotFoundError:
            return pid if not Path("/proc/self").exists() else None
        except PermissionError:
            # Another user's process: ours only if it is a postgres at all.
            return pid if "postgres" in (proc_cmdline(pid) or "") else None
        except OSError:
            return None
        # The postmaster chdirs into its data directory: this tells ours from a stale
        # pid file whose number now belongs to some other process.
        return pid if cwd == self.data_dir.resolve() else None

    def _clear_stale_pidfile(self) -> None:
        """Remove a postmaster.pid whose process is gone. PostgreSQL would do it itself, but
        it counts a zombie (a killed postmaster its new parent has not reaped yet) as alive
        and refuses to start."""
        pidfile = self.data_dir / "postmaster.pid"
        if pidfile.exists() and self.pid is None:
            pidfile.unlink(missing_ok=True)
        # The unix socket's lock file gets the same check.
        with contextlib.suppress(OSError):
            for lock in self.socket_dir.glob(".s.PGSQL.*.lock"):
                pid = read_int_line(lock)
                if pid is None or not pid_alive(pid):
                    lock.unlink(missing_ok=True)

    def _running_port(self) -> int | None:
        if self.pid is None:
            return None
        return read_int_line(self.data_dir / "postmaster.pid", 3)

    @property
    def initialized(self) -> bool:
        return (self.data_dir / "PG_VERSION").is_file()

    def _binaries(self) -> PgBinaries:
        if self._bins is None:
            want = read_int_line(self.data_dir / "PG_VERSION")
            bins = find_pg_binaries(want)
            if bins is None:
                if not is_debian_root():
                    raise LocalServicesError(
                        "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found "
                        "under /usr/lib/postgresql/*/bin or on PATH. Install them "
                        "(Debian/Ubuntu: `sudo apt-get install postgresql`; macOS: "
                        "`brew install postgresql@16`; Fedora: `sudo dnf install "
                        "postgresql-server`), or set DATABASE_URL to a server that answers."
                    )
                apt_install(["postgresql"])
                bins = find_pg_binaries(want)
                if bins is None:
                    raise LocalServicesError(
                        "installed postgresql but still no initdb/pg_ctl found"
                    )
            if want is not None and bins.major != want:
                raise LocalServicesError(
                    f"{self.data_dir} was initialised by PostgreSQL {want}, but only "
                    f"PostgreSQL {bins.major} binaries were found ({bins.bindir}). Install "
                    f"PostgreSQL {want}, or delete {self.data_dir} to start afresh."
                )
            self._bins = bins
        return self._bins

    def _user(self) -> RunAs | None:
        """Who runs PostgreSQL: us, or (when we are root) the `postgres` system user."""
        if os.geteuid() != 0:
            return None
        if self._run_as is None:
            self._run_as = ensure_system_user(PG_SYSTEM_USER)
        return self._run_as

    def _cmd(self, cmd: Sequence[str | os.PathLike[str]]) -> list[str]:
        args = [os.fspath(part) for part in cmd]
        user = self._user()
        return user.wrap(args) if user else args

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        env.pop("LANG", None)
        return env

    def _prepare_dirs(self) -> None:
        user = self._user()
        make_dirs(self.root)
        for directory in (self.root, self.socket_dir):
            make_dirs(directory)
            if user:
                user.chown(directory)
        if user:
            check_reachable(self.root, user)
            if self.initialized and self.data_dir.stat().st_uid != user.uid:
                say(f"giving {self.data_dir} to user {user.name}")
                chown_tree(self.data_dir, user)
            if self.log_file.exists():
                user.chown(self.log_file)

    def _initdb(self) -> None:
        bins = self._binaries()
        say(f"initialising PostgreSQL {bins.major} in {self.data_dir} (first run only)...")
        started = time.monotonic()
        staging = self.root / "data.initdb"
        if staging.exists():
            shutil.rmtree(staging)
        run(
            self._cmd(
                [
                    bins.initdb,
                    "-D",
                    staging,
                    "-U",
                    PG_SUPERUSER,
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--no-locale",
                ]
            ),
            what="initdb",
            cwd=self.root,
            env=self._env(),
            timeout=600,
        )
        with (staging / "postgresql.conf").open("a") as conf:
            conf.write("\n# Added by tierq.local.services: settings rewritten at every start.\n")
            conf.write("include_if_exists = 'tierq.conf'\n")
        if self.data_dir.is_dir() and not any(self.data_dir.iterdir()):
            self.data_dir.rmdir()
        if self.data_dir.exists():
            raise LocalServicesError(
                f"{self.data_dir} exists but is not a PostgreSQL data directory "
                "(no PG_VERSION); move it away or delete it"
            )
        staging.rename(self.data_dir)
        say(f"initdb done in {time.monotonic() - started:.1f}s")

    def _write_conf(self, port: int) -> None:
        sock = str(self.socket_dir).replace("'", "''")
        text = (
            "# Written by tierq.local.services before every start; put your own settings in\n"
            "# postgresql.conf (before the include) or ALTER SYSTEM.\n"
            "listen_addresses = '127.0.0.1'\n"
            f"port = {port}\n"
            f"unix_socket_directories = '{sock}'\n"
            "max_connections = 200\n"
            "shared_buffers = '256MB'\n"
            "fsync = on\n"
            "synchronous_commit = on\n"
            "full_page_writes = on\n"
        )
        path = self.data_dir / "tierq.conf"
        path.write_text(text)
        path.chmod(0o600)
        user = self._user()
        if user:
            user.chown(path)

    def _ensure_database(self) -> None:
        with psycopg.connect(self.url_for("postgres"), autocommit=True, connect_timeout=5) as conn:
            row = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (PG_DATABASE,)
            ).fetchone()
            if row is None:
                say(f"creating database {PG_DATABASE!r}")
                with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(PG_DATABASE)))

    def _start(self) -> None:
        if self.pid is not None:
            self.port = self._running_port()
            if self.is_up():
                return
            # Running but not answering yet (e.g. crash recovery): give it the start timeout.
            self._wait_until_up(self.log_file, "private PostgreSQL", self.url_for("postgres"))
            self._ensure_database()
            return
        bins = self._binaries()
        self._prepare_dirs()
        if not self.initialized:
            self._initdb()
        self._clear_stale_pidfile()
        port = self._choose_port()
        self._write_conf(port)
        self.port = port
        self.port_file.write_text(f"{port}\n")
        say(f"starting PostgreSQL {bins.major} on 127.0.0.1:{port}...")
        started = time.monotonic()
        code, out = run(
            self._cmd(
                [
                    bins.pg_ctl,
                    "-D",
                    self.data_dir,
                    "-l",
                    self.log_file,
                    "-w",
                    "-t",
                    str(round(self.start_timeout)),
                    "start",
                ]
            ),
            what="pg_ctl start",
            check=False,
            cwd=self.root,
            env=self._env(),
            timeout=self.start_timeout + 30,
        )
        if code != 0:
            raise LocalServicesError(
                f"PostgreSQL did not start (pg_ctl exit {code}) on port {port}:\n"
                f"{out.strip()}\n--- tail of {self.log_file} ---\n{log_tail(self.log_file)}"
            )
        self._wait_until_up(self.log_file, "private PostgreSQL", self.url_for("postgres"))
        self._ensure_database()
        say(f"PostgreSQL up in {time.monotonic() - started:.1f}s at {self.url}")

    def _stop(self) -> None:
        pid = self.pid
        if pid is None:
            return
        say(f"stopping private PostgreSQL (pid {pid}, fast shutdown)...")
        # SIGINT is what `pg_ctl stop -m fast` sends; signalling directly needs no user switch.
        self._terminate(pid, signal.SIGINT, STOP_TIMEOUT)

    def _sigkill(self, pid: int) -> None:
        # pg_ctl puts the postmaster in its own session: kill its whole process group so no
        # orphaned backend keeps the shared memory (and the next start) hostage.
        with contextlib.suppress(ProcessLookupError):
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
