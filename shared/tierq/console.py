"""The ``tierq`` console script ([project.scripts] in pyproject.toml).

It imports the command line only when run, so that without the ``cli`` extra the command
says which extra to install instead of ending in a traceback."""

from __future__ import annotations

import sys

from tierq.extras import MissingExtraError


def main() -> None:
    try:
        from tierq.cli import app
    except MissingExtraError as error:
        sys.exit(f"tierq: {error}")
    app()
