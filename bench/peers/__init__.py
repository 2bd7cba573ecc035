"""The benchmark's peers (PGQueuer, procrastinate) in an environment of their own.

* ``venv.py``: makes ``.local/bench-peers-venv`` from ``requirements.txt`` when it is missing
  or the requirements changed (``python -m bench.peers.venv`` does it ahead of a run);
* ``driver.py``: runs in that environment, one process per peer system, and runs the
  system's set-up and phases there (bench.phases) on the parent's request;
* ``remote.py``: the parent's side: ``PeerSystem``, a ``System`` whose set-up and phases
  run in its driver while the measurements around them are taken here as for tierq.

Standard library only (these modules are imported in both environments).
"""
