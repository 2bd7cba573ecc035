"""The typed store is the only code that names the queries of ``sql/queries/*.sql``, and
every query there is one it runs (docs/architecture.md §1, "data access")."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from tierq.dal.sql_files import queries
from tierq.dal.store.base import ROUTINE

ROOT = Path(__file__).resolve().parents[2]
STORE = [ROOT / "shared/tierq/dal/task_store.py",
         *sorted((ROOT / "shared/tierq/dal/store").glob("*.py"))]
SEARCHED = [ROOT / "shared", ROOT / "spark_glue"]
RUNNERS = {"_fetch", "_execute"}


def python_files() -> list[Path]:
    return sorted(p for folder in SEARCHED for p in folder.rglob("*.py"))


def string_constants(path: Path) -> list[str]:
    return [node.value for node in ast.walk(ast.parse(path.read_text("utf-8")))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def queries_run_by(path: Path) -> set[str]:
    """The query names a store module runs: the first argument of ``_fetch``/``_execute``,
    a name assigned to ``name`` (passed on to them) or looked up in ``self._sql``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in RUNNERS and node.args
                and isinstance(node.args[0], ast.Constant)):
            names.add(node.args[0].value)
        elif (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
              and any(isinstance(t, ast.Name) and t.id == "name" for t in node.targets)):
            names.add(node.value.value)
        elif (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
              and node.value.attr == "_sql" and isinstance(node.slice, ast.Constant)):
            names.add(node.slice.value)
    return names


def routines_of(names: set[str]) -> set[str]:
    """The calls of the functions of ``names`` (migration 0029), which ``StoreBase`` runs in
    their place where nothing is prepared."""
    return {f"{ROUTINE}{name}" for name in names} & set(queries())


def test_every_query_is_run_by_the_store_and_each_of_its_queries_exists():
    defined = set(queries())
    run = set().union(*(queries_run_by(p) for p in STORE))
    run |= routines_of(run)
    assert run - defined == set(), "the store runs queries the SQL files do not define"
    assert defined - run == set(), "queries no store method runs (delete them)"


def test_no_code_outside_the_store_names_a_query():
    defined = set(queries())
    store = {p.resolve() for p in STORE}
    named: Counter[str] = Counter()
    outside: dict[str, list[str]] = {}
    for path in python_files():
        found = defined.intersection(string_constants(path))
        if path.resolve() in store:
            named.update(found)
        for name in found if path.resolve() not in store else ():
            outside.setdefault(str(path.relative_to(ROOT)), []).append(name)
    assert outside == {}
    assert set(named) | routines_of(set(named)) == defined


def test_only_the_store_reads_the_sql_files():
    readers = [str(p.relative_to(ROOT)) for p in python_files()
               if "sql_files" in p.read_text("utf-8") and p.name != "sql_files.py"]
    assert readers == ["shared/tierq/dal/store/base.py"]


def test_the_check_sees_a_query_named_outside_the_store(tmp_path: Path):
    """(The search above finds a query name in code, not only in the store.)"""
    module = tmp_path / "somewhere.py"
    module.write_text('rows = db.fetch("make_ready", {})\n', "utf-8")
    assert "make_ready" in set(queries()).intersection(string_constants(module))
    assert queries_run_by(module) == set()
