"""Benchmarks: the engine alone, side by side with peer queues, and at scale.

Run from the repository root, e.g. ``.venv/bin/python -m bench.engine --quick``; see
bench/README.md for the method and the figures.
"""
