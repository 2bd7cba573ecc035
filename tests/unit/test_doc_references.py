"""Every module, file or document the docs and the comments name exists.

A renamed module leaves its old name behind in prose that no test imports; this test reads
what the project says about itself and resolves each name it cites.

| cited as                                        | resolves when                                  |
| ----------------------------------------------- | ---------------------------------------------- |
| a path with a folder (``dal/lua/claim.lua``)    | a tracked file ends with it, or it is relative |
|                                                 | to the citing file's folder                    |
| a bare file name in backticks (`` `claim.lua` ``) | some tracked file has that name              |
| a dotted name in backticks or a Sphinx role     | the longest prefix is a module under `shared/` |
| (``tierq.logic.claim.give_back``)               | and the rest its top-level or class-level name |

Read: the living documents (docs/, the READMEs) whole; Python files' comments and
docstrings; Lua and SQL comments. CHANGELOG.md is history and is not read. Paths that name
what the project writes at run or build time (bench results, the local stack's state, the
layer's manifest) and paths of a user's code in examples are listed in ``NOT_IN_THE_TREE``.
"""

from __future__ import annotations

import io
import re
import subprocess
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT / "shared"

# Paths that exist only once something runs, or in a user's project.
NOT_IN_THE_TREE = (
    "bench/results/",  # what a benchmark writes (git-ignored)
    ".local/",  # the local stack's servers and state (git-ignored)
    "local/services/valkey-cluster/credentials.json",  # written under .local/ by the stack
    "python/tierq_layer.json",  # written into the built layer
    "glue/feed_queue.py",  # an S3 key in the Glue artifacts bucket
    "orders_consumer/app.py",  # a user's function in the README's example
    "sql/migrations/NNNN_name.sql",  # the naming pattern of a migration
)
LIVING_DOCUMENTS = ("docs/", "README.md", "bench/README.md", "layers/README.md",
                    "examples/README.md", "shared/tierq/dal/lua/README.md")
SUFFIXES = "py|md|lua|sql|sh|yaml|toml|json"
PATH = re.compile(rf"(?<![\w./~$-])((?:[\w.-]+/)+[\w.-]+\.(?:{SUFFIXES}))\b")
BARE_FILE = re.compile(r"`([\w-]+\.(?:py|lua|sql|md))`")
DOTTED = re.compile(r"(?:``?|:(?:mod|func|class|meth|data|attr|obj):`~?)(tierq(?:\.\w+)+)`")
TRIPLE_QUOTES = ('"' * 3, "'" * 3)


@cache
def tracked() -> tuple[str, ...]:
    """The repository's tracked files (the tree a clean checkout has)."""
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    return tuple(out.split())


@cache
def tracked_names() -> frozenset[str]:
    return frozenset(Path(f).name for f in tracked())


def is_file_name(dotted: str) -> bool:
    """``tierq.gluewheels.zip`` names a file, not a module."""
    return dotted.rsplit(".", 1)[-1] in {"zip", "whl", "json", "yaml", "toml", "py", "md"}


def path_resolves(cited: str, citing: str) -> bool:
    cited = cited.removeprefix("./")
    if cited.startswith("../") or any(cited.startswith(p) or cited == p.rstrip("/")
                                      for p in NOT_IN_THE_TREE):
        return True
    if (ROOT / Path(citing).parent / cited).exists():
        return True
    return any(f == cited or f.endswith("/" + cited) for f in tracked())


def dotted_resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        base = SHARED.joinpath(*parts[:k])
        for module in (base.with_suffix(".py"), base / "__init__.py"):
            if module.exists():
                rest = parts[k:]
                return not rest or defines(module, rest[0])
    return False


def defines(module: Path, name: str) -> bool:
    """Whether ``module`` binds ``name`` at its top level or in a class body."""
    pattern = (rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b|^\s*{name}\s*[:=]"
               rf"|^\s*(?:from\s+\S+\s+)?import\s.*\b{name}\b|^\s+self\.{name}\b")
    return re.search(pattern, module.read_text(), re.M) is not None


def python_prose(text: str) -> Iterator[tuple[int, str]]:
    """The comments and docstring-like strings of a Python file, with their first line."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return
    for tok in tokens:
        docstring_like = tok.type == tokenize.STRING and tok.string.lstrip(
            "rbuRBU").startswith(TRIPLE_QUOTES)
        if tok.type == tokenize.COMMENT or docstring_like:
            yield tok.start[0], tok.string


def comment_prose(text: str, marker: str) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(text.splitlines(), 1):
        if marker in line:
            yield number, line[line.index(marker):]


def prose_of(path: str) -> Iterator[tuple[int, str]]:
    text = (ROOT / path).read_text(encoding="utf-8")
    if path.endswith(".md"):
        if path.startswith(LIVING_DOCUMENTS):
            yield from enumerate(text.splitlines(), 1)
    elif path.endswith(".py"):
        yield from python_prose(text)
    elif path.endswith((".lua", ".sql")):
        yield from comment_prose(text, "--")


def unresolved() -> list[str]:
    found: list[str] = []
    for path in tracked():
        if path == "CHANGELOG.md" or not (ROOT / path).is_file():
            continue
        for number, chunk in prose_of(path):
            for offset, line in enumerate(chunk.splitlines()):
                where = f"{path}:{number + offset}"
                if "://" in line:
                    line = re.sub(r"\w+://\S+", "", line)
                found += [f"{where}: {m}" for m in PATH.findall(line)
                          if not path_resolves(m, path)]
                found += [f"{where}: {m}" for m in BARE_FILE.findall(line)
                          if m not in tracked_names()]
                found += [f"{where}: {m}" for m in DOTTED.findall(line)
                          if not is_file_name(m) and not dotted_resolves(m)]
    return found


def test_every_cited_module_file_and_document_exists() -> None:
    missing = unresolved()
    assert not missing, "names cited in docs or comments that do not exist:\n" + "\n".join(
        missing)


def test_the_check_finds_a_name_that_does_not_exist() -> None:
    assert not dotted_resolves("tierq.logic.no_such_module")
    assert not dotted_resolves("tierq.logic.claim.no_such_function")
    assert dotted_resolves("tierq.logic.claim")
    assert not path_resolves("api/routes/claims.py", "docs/architecture.md")
    assert path_resolves("dal/lua/claim.lua", "docs/architecture.md")
