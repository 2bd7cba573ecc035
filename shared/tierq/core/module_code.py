"""tierq's modules read from one file of the Lambda layer: a cold start takes each module's
code from there instead of searching the package's folders for its source and bytecode.

Importing a module through Python's path finder costs some 300,000 instructions besides
running the module's code (the finder's look-ups, a stat of the source, opening, reading
and checking the ``.pyc``); a function's import loads about 90 of tierq's modules. The
layer build (``layers/tierq/build_layer.py``, step 4) writes the bytecode of every tierq
module, the very unchecked-hash ``.pyc`` files it compiled, into ``module_code.marshal``
beside this module. :func:`install` (from ``tierq.core.cold_start.initialising``) puts a
finder first on ``sys.meta_path`` that answers the names the file holds with a spec of the
module's source file, so ``__file__``, ``__path__``, tracebacks and the files read beside a
module are what the path finder gives, and a loader whose code comes from the file.

| the file | a tierq module it holds | any other module |
| --- | --- | --- |
| absent (sources, a wheel) | the path finder, as always | the path finder |
| written by another Python (another bytecode magic number) | the path finder | the path finder |
| unreadable (truncated, another shape) | the path finder, with a warning | the path finder |
| this Python's | its stored code (a bad entry: its ``.pyc``, with a warning) | the path finder |
| any, under ``python -O`` | the path finder (the stored code keeps its asserts) | the path finder |

The file is trusted as the layer's unchecked-hash ``.pyc`` files are: it is written with
them, and a published layer never changes. It stays installed after the initialisation, so a
module imported by a first request (``tierq.core.lazy``) is read from it too, and the file's
bytes (under 2 MB: the command line's, the client's and the local stack's modules are left
out) stay in memory with it. A top-level name is never answered: ``tierq`` itself is imported
before the finder is installed, from wherever the path finder found it. This module
imports nothing of tierq: the layer build loads it by path to write the file.
"""

from __future__ import annotations

import _imp
import logging
import marshal
import os
import sys
import threading
from importlib.machinery import ModuleSpec, SourceFileLoader
from importlib.util import MAGIC_NUMBER
from types import CodeType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (the layer build loads this module into its own Python, 3.8 or later)
    from collections.abc import Sequence
    from pathlib import Path

    # module name -> (whether it is a package, its marshalled code: a view of the file)
    Codes = dict[str, tuple[bool, memoryview]]

CODE_FILE = os.path.join(os.path.dirname(__file__), "module_code.marshal")
# tierq's folder: the package whose modules the file holds
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "tierq"
# a .pyc's flags word (PEP 552): hash-based, source not checked
UNCHECKED_HASH = 0b01

logger = logging.getLogger(__name__)

# the file: the magic number, the index's length (8 bytes, little-endian), the index
# (marshalled: module name -> (is a package, offset, length) in the codes that follow), the
# codes (each module's marshalled code, one after another)
LENGTH_BYTES = 8


class StoredLoader(SourceFileLoader):
    """A source file's loader whose code is the stored one: the rest (the source for
    tracebacks, resources, ``__file__``) is the source file's."""

    def __init__(self, fullname: str, path: str, code: memoryview) -> None:
        super().__init__(fullname, path)
        self.stored_code = code

    def get_code(self, fullname: str) -> CodeType:
        if fullname == self.name:
            try:
                code = marshal.loads(self.stored_code)
            except Exception as exc:  # (a cache: a bad entry must not stop the import)
                logger.warning("module code store: %s unreadable (%s): importing its "
                               "source's bytecode", fullname, exc)
            else:
                if type(code) is CodeType:
                    # the code names the file it was compiled from: the build's copy
                    _imp._fix_co_filename(code, self.path)  # type: ignore[attr-defined]
                    return code
                logger.warning("module code store: %s holds no code: importing its "
                               "source's bytecode", fullname)
        return super().get_code(fullname)  # type: ignore[return-value]


class StoredModules:
    """A meta path finder answering the modules of ``codes``, found under ``package_dir``."""

    def __init__(self, package_dir: str, codes: Codes) -> None:
        self.package_dir = package_dir
        self.codes = codes
        self.cache_tag = sys.implementation.cache_tag

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: object = None) -> ModuleSpec | None:
        entry = self.codes.get(fullname)
        if entry is None or path is None:
            # (a top-level name: tierq itself is imported before the finder is installed,
            # and one imported again may be another copy)
            return None
        is_package, code = entry
        # (string operations: os.path.join costs more than the rest of the look-up)
        sep = os.sep
        tail = fullname.partition(".")[2].replace(".", sep)
        if is_package:
            directory = f"{self.package_dir}{sep}{tail}" if tail else self.package_dir
            source = f"{directory}{sep}__init__.py"
            stem = "__init__"
        else:
            source = f"{self.package_dir}{sep}{tail}.py"
            stem = source.rpartition(sep)[2][:-3]
        folder = source.rpartition(sep)[0]
        parent_dir = folder.rpartition(sep)[0] if is_package else folder
        if parent_dir not in path:
            return None  # (another copy of the package, imported from elsewhere)
        spec = ModuleSpec(fullname, StoredLoader(fullname, source, code), origin=source,
                          is_package=is_package)
        spec.has_location = True
        if is_package:
            spec.submodule_search_locations = [directory]
        # (what the spec would work out from the source's path; the layer has this file)
        spec.cached = f"{folder}{sep}__pycache__{sep}{stem}.{self.cache_tag}.pyc"
        return spec

    def invalidate_caches(self) -> None:
        """Nothing to forget: the file does not change."""


_installed = threading.Lock()  # (held while one thread checks and installs)


def load(path: str = CODE_FILE) -> Codes | None:
    """The stored modules; None when the file is absent, another Python's or unreadable (the
    last logged: a cache that cannot be read must not stop a cold start)."""
    try:
        with open(path, "rb") as stored:
            data = stored.read()
    except FileNotFoundError:
        return None
    except Exception as exc:  # (a folder, no permission, …)
        logger.warning("module code store %s unreadable (%s): importing as usual", path, exc)
        return None
    if data[:len(MAGIC_NUMBER)] != MAGIC_NUMBER:
        return None
    try:
        return _parse(data)
    except Exception as exc:  # (MemoryError included: a length that claims gigabytes)
        logger.warning("module code store %s unreadable (%s): importing as usual", path, exc)
        return None


def _parse(data: bytes) -> Codes:
    start = len(MAGIC_NUMBER) + LENGTH_BYTES
    index_length = int.from_bytes(data[len(MAGIC_NUMBER):start], "little")
    if start + index_length > len(data):
        raise ValueError(f"an index of {index_length} bytes in a file of {len(data)}")
    view = memoryview(data)
    index = marshal.loads(view[start:start + index_length])
    if not isinstance(index, dict):
        raise TypeError(f"an index of {type(index).__name__}")
    codes_start = start + index_length
    codes: Codes = {}
    for name, entry in index.items():
        if not (type(name) is str and type(entry) is tuple and len(entry) == 3):
            raise ValueError(f"a bad entry {name!r}")
        is_package, offset, length = entry
        if not (type(is_package) is bool and type(offset) is int and type(length) is int
                and offset >= 0 and length >= 0
                and codes_start + offset + length <= len(data)):
            raise ValueError(f"a bad entry {name!r}")
        codes[name] = (is_package, view[codes_start + offset:codes_start + offset + length])
    return codes


def install(path: str = CODE_FILE, package_dir: str = PACKAGE_DIR) -> bool:
    """The finder of ``path``'s modules first on ``sys.meta_path`` (once a process); whether
    it is there."""
    if sys.flags.optimize:
        return False  # (the stored code is the unoptimised one: asserts kept)
    with _installed:
        if any(type(finder).__name__ == "StoredModules"
               and type(finder).__module__ == __name__ for finder in sys.meta_path):
            return True  # (a reloaded module's class is another class of the same name)
        codes = load(path)
        if codes is None:
            return False
        sys.meta_path.insert(0, StoredModules(package_dir, codes))
        return True


def write(package_dir: Path, cache_tag: str, path: Path | None = None,
          skip: tuple[str, ...] = ()) -> int:
    """Writes the unchecked-hash bytecode of every module under ``package_dir`` (compiled
    for ``cache_tag``, e.g. ``cpython-313``, in ``__pycache__``) but those of the
    subpackages ``skip`` names (``"cli"``: ``tierq.cli`` and below) to ``path`` (by default
    ``core/module_code.marshal`` there), stamped with that bytecode's magic number; how
    many modules. A module without such bytecode fails the build: ValueError."""
    index: dict[str, tuple[bool, int, int]] = {}
    codes: list[bytes] = []
    offset = 0
    magic: bytes | None = None
    for source in sorted(package_dir.rglob("*.py")):
        if source.relative_to(package_dir).parts[0] in skip:
            continue
        compiled = source.parent / "__pycache__" / f"{source.stem}.{cache_tag}.pyc"
        try:
            data = compiled.read_bytes()
        except FileNotFoundError:
            raise ValueError(f"{source}: no bytecode {compiled.name} beside it") from None
        flags = int.from_bytes(data[4:8], "little")
        if flags != UNCHECKED_HASH:
            raise ValueError(f"{compiled}: not unchecked-hash bytecode (flags {flags:#04b})")
        if magic is None:
            magic = data[:4]
        elif data[:4] != magic:
            raise ValueError(f"{compiled}: another Python's bytecode than the rest")
        relative = source.relative_to(package_dir).with_suffix("").parts
        is_package = relative[-1] == "__init__"
        name = ".".join((PACKAGE, *(relative[:-1] if is_package else relative)))
        code = data[16:]
        index[name] = (is_package, offset, len(code))
        codes.append(code)
        offset += len(code)
    if magic is None:
        raise ValueError(f"{package_dir}: no module")
    marshalled_index = marshal.dumps(index)
    target = path or package_dir / "core" / "module_code.marshal"
    temporary = target.with_name(f"{target.name}.tmp")
    with open(temporary, "wb") as out:
        out.write(magic + len(marshalled_index).to_bytes(LENGTH_BYTES, "little"))
        out.write(marshalled_index)
        out.writelines(codes)
    os.replace(temporary, target)
    return len(index)
