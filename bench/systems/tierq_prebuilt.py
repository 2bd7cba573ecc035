"""Imported last by the fork server of tierq's worker processes: tierq's deferred work
(``tierq.core.warm_up``) done there once, so each process forked from it starts with it
done.

Each worker still calls ``warm_up`` before the start signal, as a long-running worker
does; forked from here it finds nothing left to build. Built in each of 8 or 16 workers
on 2 cores, it took a phase's set-up 1 to 2.5 s of wall time (the measured part never held
it); a benchmark's smoke runs in the suite are mostly set-up.
"""

from __future__ import annotations

from tierq.core.warm_up import warm_up

# (the collector is each worker's own to tune: bench/phases.py freezes it per process)
warm_up(tune_collector=False)
