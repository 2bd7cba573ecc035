"""The peers' side of a peer system: started by ``bench.peers.remote.PeerDriver`` with the
interpreter of the peers' environment, it answers the parent's requests, one JSON object a
line on stdin, with one JSON line each on the control pipe (``--control-fd``):

* ``{"op": "call", "target": "module:function", "args": [...]}``: e.g. the system's set-up
  on a fresh database; answers ``{"ok": <return value>}``;
* ``{"op": "phase", "label", "roles": [{"kind", "target", "spec"}], "total", "timeout"}``:
  runs the phase (bench.phases) in worker processes of this environment. When they are all
  set up it sends ``{"ready": true}`` and waits for ``go`` on stdin, so that the parent
  takes its measurements right before the start; answers ``{"ok": <PhaseResult>}``.

Failures answer ``{"phase_failed": text}`` or ``{"error": traceback}``. Progress lines go to
the inherited stdout. tierq is not installed here: nothing run here may import it.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import IO, Any

from bench.phases import PhaseFailed, Role, run_phase


def resolve(target: str) -> Callable[..., Any]:
    module, _, name = target.partition(":")
    function: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return function


class Driver:
    def __init__(self, control: IO[str], preload: list[str]) -> None:
        self.control = control
        self.preload = preload

    def send(self, message: dict[str, Any]) -> None:
        self.control.write(json.dumps(message) + "\n")
        self.control.flush()

    def start_together(self) -> None:
        """The phase's processes are set up: the parent measures, then says go."""
        self.send({"ready": True})
        if sys.stdin.readline().strip() != "go":
            raise RuntimeError("the parent did not say go")

    def answer(self, request: dict[str, Any]) -> Any:
        if request["op"] == "call":
            return resolve(request["target"])(*request.get("args", []))
        if request["op"] == "phase":
            roles = [Role(r["kind"], resolve(r["target"]), r["spec"]) for r in request["roles"]]
            result = run_phase(request["label"], roles, total=request["total"],
                               timeout=request["timeout"], preload=self.preload,
                               at_start=self.start_together)
            return {f.name: getattr(result, f.name) for f in dataclasses.fields(result)
                    if f.name != "start_mark"}
        raise ValueError(f"unknown request {request['op']!r}")

    def serve(self) -> None:
        while line := sys.stdin.readline():
            try:
                self.send({"ok": self.answer(json.loads(line))})
            except PhaseFailed as exc:
                self.send({"phase_failed": str(exc)})
            except Exception:
                self.send({"error": traceback.format_exc()})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers.driver")
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--preload", default="", help="modules the fork server imports")
    args = parser.parse_args(argv)
    with os.fdopen(args.control_fd, "w") as control:
        Driver(control, [m for m in args.preload.split(",") if m]).serve()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
