"""Smoke runs of the benchmark scripts under bench/ (tiny sizes, end to end; numbers are
not judged)."""
