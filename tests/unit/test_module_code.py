"""tierq.core.module_code: a copy of the package laid out as the layer build leaves it
(unchecked-hash bytecode beside the sources, and the module store), imported in a fresh
interpreter, with and without the store: the same code, files and resources either way."""

from __future__ import annotations

import compileall
import json
import logging
import marshal
import os
import shutil
import subprocess
import sys
from importlib.util import MAGIC_NUMBER
from pathlib import Path

import pytest

from tierq.core import module_code
from tierq.core.module_code import StoredLoader, StoredModules

ROOT = Path(__file__).resolve().parents[2]

# Imports a function's worth of tierq as a handler module does, then reports what it got.
PROBE = """
import inspect, json, sys
from tierq.core.cold_start import initialising
with initialising():
    import tierq.engine
    from tierq.dal import sql_files
enqueue = tierq.engine.Tierq.enqueue.__code__
print(json.dumps({
    "stored": sorted(name for name, module in sys.modules.items()
                     if type(getattr(module, "__loader__", None)).__name__ == "StoredLoader"),
    "tierq": sorted(name for name in sys.modules if name.startswith("tierq")),
    "file": tierq.engine.__file__,
    "cached": tierq.engine.__cached__,
    "path": list(sys.modules["tierq.dal"].__path__),
    "code": enqueue.co_code.hex(),
    "filename": enqueue.co_filename,
    "source": inspect.getsource(tierq.engine.Tierq.enqueue).splitlines()[0].strip(),
    "queries": len(sql_files.queries()),
}))
"""


@pytest.fixture(scope="module")
def layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The layer's python/ with tierq only (the other packages come from this environment),
    compiled as the layer build compiles it, and its module store."""
    out = tmp_path_factory.mktemp("layer")
    shutil.copytree(ROOT / "shared" / "tierq", out / "tierq",
                    ignore=shutil.ignore_patterns("__pycache__", "*.marshal"))
    assert compileall.compile_dir(
        out / "tierq", quiet=1,
        invalidation_mode=compileall.py_compile.PycInvalidationMode.UNCHECKED_HASH)
    module_code.write(out / "tierq", sys.implementation.cache_tag,
                      skip=("cli", "client", "local"))
    return out


def probe(layer: Path, code: str = PROBE) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(layer), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=layer,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def without_store(layer: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "no-store"
    shutil.copytree(layer, copy)
    (copy / "tierq" / "core" / "module_code.marshal").unlink()
    return copy


def test_a_cold_start_reads_tierqs_modules_from_the_store_as_the_path_finder_would(
        layer: Path, tmp_path: Path) -> None:
    stored = probe(layer)
    plain = probe(without_store(layer, tmp_path))
    assert "tierq.engine" in stored["stored"] and "tierq.dal.store.rows" in stored["stored"]
    assert plain["stored"] == []
    # every tierq module imported after the store was installed came from it
    early = {"tierq", "tierq.core", "tierq.core.cold_start", "tierq.core.module_code"}
    assert set(stored["tierq"]) - set(stored["stored"]) <= early  # type: ignore[arg-type]
    assert stored["tierq"] == plain["tierq"]
    # the same code, named after the same file, whose source and resources are found
    for field in ("code", "source", "queries"):
        assert stored[field] == plain[field], field
    engine = str(layer / "tierq" / "engine.py")
    assert stored["file"] == stored["filename"] == engine
    assert stored["cached"] == str(layer / "tierq" / "__pycache__" /
                                   f"engine.{sys.implementation.cache_tag}.pyc")
    assert os.path.exists(str(stored["cached"]))
    assert stored["path"] == [str(layer / "tierq" / "dal")]


def test_a_module_the_store_lacks_comes_from_its_source(layer: Path, tmp_path: Path) -> None:
    copy = tmp_path / "newer"
    shutil.copytree(layer, copy)
    (copy / "tierq" / "core" / "added_after_build.py").write_text("VALUE = 42\n")
    code = ("import sys\nfrom tierq.core.cold_start import initialising\n"
            "with initialising():\n    from tierq.core import added_after_build, ids\n"
            "import json\nprint(json.dumps([added_after_build.VALUE,\n"
            "    type(added_after_build.__loader__).__name__, type(ids.__loader__).__name__]))\n")
    assert probe(copy, code) == [42, "SourceFileLoader", "StoredLoader"]  # type: ignore[comparison-overlap]


@pytest.mark.parametrize("content, warned", [
    (b"", False),  # (an empty file: no magic number, as another Python's)
    (b"\x00\x01\x02\x03" + b"\x00" * 20, False),  # another Python's
    (MAGIC_NUMBER + (5).to_bytes(8, "little") + b"\xff\xff", True),  # truncated
    (MAGIC_NUMBER + (3).to_bytes(8, "little") + marshal.dumps(7)[:3], True),
    (MAGIC_NUMBER + len(marshal.dumps(7)).to_bytes(8, "little") + marshal.dumps(7), True),
    (MAGIC_NUMBER + len(marshal.dumps({"tierq.x": (False, 0, 99)})).to_bytes(8, "little")
     + marshal.dumps({"tierq.x": (False, 0, 99)}), True),  # past the file's end
])
def test_a_store_that_cannot_be_used_is_ignored(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes, warned: bool) -> None:
    path = tmp_path / "module_code.marshal"
    path.write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="tierq.core.module_code"):
        assert module_code.load(str(path)) is None
    assert bool(caplog.records) is warned
    assert module_code.load(str(tmp_path / "absent.marshal")) is None


def test_a_broken_store_leaves_the_imports_to_the_path_finder(
        layer: Path, tmp_path: Path) -> None:
    copy = without_store(layer, tmp_path)
    (copy / "tierq" / "core" / "module_code.marshal").write_bytes(MAGIC_NUMBER + b"\x07")
    result = probe(copy)
    assert result["stored"] == [] and result["queries"] == probe(layer)["queries"]


def test_a_module_whose_stored_code_is_bad_comes_from_its_bytecode(
        layer: Path, caplog: pytest.LogCaptureFixture) -> None:
    source = str(layer / "tierq" / "core" / "ids.py")
    for stored in (memoryview(marshal.dumps(7)), memoryview(b"\xff\x00garbled")):
        with caplog.at_level(logging.WARNING, logger="tierq.core.module_code"):
            code = StoredLoader("tierq.core.ids", source, stored).get_code("tierq.core.ids")
        assert code.co_filename == source and "uuid7_strings" in code.co_names
        assert "tierq.core.ids" in caplog.text
        caplog.clear()


def test_a_store_that_is_a_folder_is_ignored(tmp_path: Path,
                                             caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tierq.core.module_code"):
        assert module_code.load(str(tmp_path)) is None
    assert "unreadable" in caplog.text


def test_an_optimising_interpreter_leaves_the_imports_to_the_path_finder(layer: Path) -> None:
    code = ("import json, sys\nfrom tierq.core import module_code\n"
            "print(json.dumps([sys.flags.optimize, module_code.install()]))\n")
    env = {**os.environ, "PYTHONPATH": str(layer), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-O", "-c", code], env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    assert json.loads(done.stdout) == [1, False]


def test_the_finder_answers_only_its_own_copys_modules(layer: Path) -> None:
    codes = module_code.load(str(layer / "tierq" / "core" / "module_code.marshal"))
    assert codes is not None
    finder = StoredModules(str(layer / "tierq"), codes)
    assert finder.find_spec("json") is None
    assert finder.find_spec("tierq") is None  # (imported before; again: maybe another copy)
    assert finder.find_spec("tierq.engine", [str(ROOT / "shared" / "tierq")]) is None
    spec = finder.find_spec("tierq.engine", [str(layer / "tierq")])
    assert spec is not None and isinstance(spec.loader, StoredLoader)
    assert spec.origin == str(layer / "tierq" / "engine.py") and spec.parent == "tierq"
    package = finder.find_spec("tierq.dal.store", [str(layer / "tierq" / "dal")])
    assert package is not None and package.submodule_search_locations == [
        str(layer / "tierq" / "dal" / "store")]
    assert package.origin == str(layer / "tierq" / "dal" / "store" / "__init__.py")


def test_install_is_once_a_process_and_only_with_a_store(layer: Path, tmp_path: Path) -> None:
    code = ("import json, sys\nfrom tierq.core import module_code\n"
            f"first = module_code.install({str(tmp_path / 'absent.marshal')!r})\n"
            "second = module_code.install()\nthird = module_code.install()\n"
            "finders = [type(f).__name__ for f in sys.meta_path].count('StoredModules')\n"
            "print(json.dumps([first, second, third, finders, "
            "type(sys.meta_path[0]).__name__]))\n")
    assert probe(layer, code) == [False, True, True, 1, "StoredModules"]  # type: ignore[comparison-overlap]


def test_the_writer_takes_unchecked_hash_bytecode_only(tmp_path: Path) -> None:
    package = tmp_path / "tierq"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "one.py").write_text("ONE = 1\n")
    with pytest.raises(ValueError, match="no bytecode"):
        module_code.write(package, sys.implementation.cache_tag)
    assert compileall.compile_dir(package, quiet=1)  # timestamp-based
    with pytest.raises(ValueError, match="not unchecked-hash"):
        module_code.write(package, sys.implementation.cache_tag)
    assert compileall.compile_dir(
        package, quiet=1, force=True,
        invalidation_mode=compileall.py_compile.PycInvalidationMode.UNCHECKED_HASH)
    (package / "cli").mkdir()
    (package / "cli" / "__init__.py").write_text("")
    assert compileall.compile_dir(
        package, quiet=1, force=True,
        invalidation_mode=compileall.py_compile.PycInvalidationMode.UNCHECKED_HASH)
    assert module_code.write(package, sys.implementation.cache_tag, tmp_path / "s",
                             skip=("cli",)) == 2
    codes = module_code.load(str(tmp_path / "s"))
    assert codes is not None and sorted(codes) == ["tierq", "tierq.one"]
    assert codes["tierq"][0] is True and codes["tierq.one"][0] is False
    namespace: dict[str, object] = {}
    exec(marshal.loads(codes["tierq.one"][1]), namespace)
    assert namespace["ONE"] == 1
