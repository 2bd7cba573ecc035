"""Maintenance jobs, one module each, each with one entry point ``run(ctx) -> summary`` that
does one pass (River's internal/maintenance layout). The scheduled Lambdas and the local
stack call them on their ticks; running two passes at once does no harm."""
