"""The parent's side of a peer system: ``PeerSystem`` runs its set-up and its phases in a
driver process of the peers' environment (bench/peers/driver.py), while everything
measured around a phase (PostgreSQL's counters, the servers' CPU, the start mark) is taken
in the parent, as for tierq. The peers' modules are imported here too, for their names and
settings: they import their libraries only inside the functions that run in the driver."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, LiteralString

from bench.peers.venv import ROOT, peer_python
from bench.phases import PhaseFailed, PhaseResult, Role
from bench.systems import Prepared, System, count_rows

if TYPE_CHECKING:
    from bench.stores import Stores


def target_name(function: Callable[..., Any]) -> str:
    return f"{function.__module__}:{function.__qualname__}"


class PeerDriver:
    """One driver process in the peers' environment, started at the first request."""

    def __init__(self, preload: tuple[str, ...]) -> None:
        self.preload = preload
        self.process: subprocess.Popen[str] | None = None
        self.control: IO[str] | None = None

    def start(self) -> subprocess.Popen[str]:
        python = peer_python()
        read_fd, write_fd = os.pipe()
        # Only the repository on the path: nothing of tierq's environment leaks in.
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        try:
            self.process = subprocess.Popen(
                [str(python), "-m", "bench.peers.driver", "--control-fd", str(write_fd),
                 "--preload", ",".join(self.preload)],
                stdin=subprocess.PIPE, text=True, cwd=ROOT, env=env, pass_fds=(write_fd,))
        finally:
            os.close(write_fd)
        self.control = os.fdopen(read_fd)
        return self.process

    @property
    def pid(self) -> int:
        return (self.process or self.start()).pid

    def request(self, request: dict[str, Any], on_ready: Callable[[], None] | None = None
                ) -> Any:
        process = self.process or self.start()
        assert process.stdin is not None and self.control is not None
        process.stdin.write(json.dumps(request) + "\n")
        process.stdin.flush()
        while line := self.control.readline():
            message = json.loads(line)
            if "ready" in message:
                if on_ready is not None:
                    on_ready()
                process.stdin.write("go\n")
                process.stdin.flush()
            elif "ok" in message:
                return message["ok"]
            elif "phase_failed" in message:
                raise PhaseFailed(message["phase_failed"])
            else:
                raise RuntimeError(f"the peers' driver failed:\n{message['error']}")
        raise RuntimeError(f"the peers' driver exited ({process.wait()})")

    def close(self) -> None:
        if self.process is None:
            return
        assert self.process.stdin is not None and self.control is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.control.close()
        self.process = None


class PeerSystem(System):
    """A peer queue: its set-up and phases run in its driver; ``remaining`` is one count
    (``unfinished``) asked of its database from here."""

    setup: staticmethod[[str], None]  # run in the driver with the fresh database's URL
    unfinished: LiteralString = ""

    def __init__(self) -> None:
        self.driver = PeerDriver(self.preload)

    def prepare(self, stores: Stores) -> Prepared:
        url = stores.fresh_database(f"bench_{self.name}")
        self.driver.request({"op": "call", "target": target_name(self.setup),
                             "args": [url]})
        return Prepared(self.name, {"database_url": url}, url)

    def remaining(self, prepared: Prepared) -> int:
        return count_rows(prepared.database_url, self.unfinished)

    def client_pids(self, prepared: Prepared) -> list[int]:
        return [self.driver.pid]  # it runs the phase as this process does for tierq

    def run_phase(self, label: str, roles: list[Role], *, total: int, timeout: float,
                  at_start: Callable[[], Any] | None = None) -> PhaseResult:
        mark: list[Any] = [None]

        def measure_at_start() -> None:
            if at_start is not None:
                mark[0] = at_start()

        answer = self.driver.request(
            {"op": "phase", "label": label, "total": total, "timeout": timeout,
             "roles": [{"kind": r.kind, "target": target_name(r.target), "spec": r.spec}
                       for r in roles]},
            on_ready=measure_at_start)
        return PhaseResult(**answer, start_mark=mark[0])

    def close(self) -> None:
        self.driver.close()
