"""A Lambda function's initialisation with the cycle collector paused: its handler module is
imported inside :func:`initialising`, and what the import made is then kept out of every
later collection.

Importing a function's modules allocates some 30,000 objects (classes, functions, module
dictionaries) that live as long as the process; the cycle collector, left running, walks
them again and again while they are made (about a tenth of the import's CPU) and once more
at the first request. Paused, then frozen (``gc.freeze``: moved to the permanent
generation), they are never walked; objects made later are collected as usual. A cycle left
unreachable by the import itself is kept too, once. tierq's modules are read from the
layer's one file of their bytecode when it has one (``tierq.core.module_code``), and the
dataclasses the block defines take their methods' code from the layer's build when it holds
it (``tierq.core.dataclass_code``).
See docs/architecture.md (the Lambda runtime).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def initialising() -> Iterator[None]:
    """The cycle collector paused for the block (a handler module's imports and set-up),
    then the objects alive at its end frozen and the collector resumed as it was; tierq's
    modules read from the layer's store of their code (installed for good), the block's
    dataclasses built from the layer's precompiled methods."""
    enabled = gc.isenabled()
    gc.disable()
    # (imported once the collector is paused, as everything the block loads)
    from tierq.core import module_code

    module_code.install()
    from tierq.core.dataclass_code import precompiled

    try:
        with precompiled():
            yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
