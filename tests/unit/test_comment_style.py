"""Comments and docstrings stay readable: short sentences and no narration of past versions.

A sentence of 130 words with five semicolons hides the decision it describes, and a comment
that says what the code used to do is wrong the day it merges; git keeps the history. This
test reads the comments and docstrings of ``shared/``, ``bench/``, ``spark_glue/`` and
``functions/`` (Python, and the ``--`` comments of Lua and of the SQL queries).

| prose                                     | fails when                                     |
| ----------------------------------------- | ---------------------------------------------- |
| a sentence                                | it has more than ``MAX_WORDS`` words           |
| a comment or docstring                    | it uses a phrase of ``HISTORY``                |

A sentence ends at ``.``, ``!`` or ``?`` followed by a capital, a backtick or a bracket, at a
blank line or at a list item. Table rows (``|``), doctest lines and indented code blocks after
``::`` are not prose. Applied migrations and the schema snapshot they make are not read.
"""

from __future__ import annotations

import io
import re
import subprocess
import tokenize
from collections.abc import Iterator
from fnmatch import fnmatch
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AREAS = ("shared/", "bench/", "spark_glue/", "functions/")
# Applied migrations record a change, and the schema snapshot is what they make.
NOT_READ = ("shared/tierq/dal/sql/migrations/", "shared/tierq/dal/sql/schema.sql")
MAX_WORDS = 80
# "No longer than" bounds a time; "used to" after an auxiliary or opening a sentence is the
# passive ("is used to route", "Used to route"), not history.
HISTORY = re.compile(
    r"\b(?:which (?:this|it) replaced|no longer(?! than)|was replaced|previously|formerly"
    r"|(?<!\bis )(?<!\bare )(?<!\bwas )(?<!\bwere )(?<!\bbe )(?<!\bbeen )(?<!\bbeing )"
    r"(?-i:used to))\b",
    re.I)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(\[*\"'])")
LIST_ITEM = re.compile(r"^(?:[-*+]|\d+[.)])\s")
RST_TABLE_BORDER = re.compile(r"^=+(?:\s+=+)*$")
TRIPLE_QUOTES = ('"' * 3, "'" * 3)
STATEMENT_START = (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)

# Files left out while they are rewritten (none now). An entry must name a file that still
# fails: the test fails on an entry whose file already passes.
EXCLUDED_FOR_NOW: tuple[str, ...] = ()


def checked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", *AREAS], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    return [f for f in out.split() if f.endswith((".py", ".lua", ".sql"))
            and not f.startswith(NOT_READ) and (ROOT / f).is_file()]


def python_chunks(text: str) -> Iterator[tuple[int, list[str]]]:
    """Each docstring and each block of comments, as (first line, its lines).

    A docstring is a string that is a statement of its own (not a SQL text or a message that
    is assigned or passed). Full-line comments on consecutive lines at one column form a
    block; a comment after code stands alone.
    """
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return
    code = [t for t in tokens if t.type not in (tokenize.NL, tokenize.COMMENT)]
    statements = {id(t) for before, t, after in zip([None, *code[:-1]], code, [*code[1:], None],
                                                   strict=True)
                  if t.type == tokenize.STRING
                  and (before is None or before.type in STATEMENT_START)
                  and (after is None or after.type == tokenize.NEWLINE)}
    block: list[str] = []
    start = last = column = -1
    for tok in tokens:
        if tok.type == tokenize.COMMENT:
            full_line = not tok.line[:tok.start[1]].strip()
            line = tok.string.lstrip("#!:").strip()
            if full_line and block and tok.start[0] == last + 1 and tok.start[1] == column:
                block.append(line)
            else:
                if block:
                    yield start, block
                block, start, column = [line], tok.start[0], tok.start[1]
                if not full_line:
                    yield start, block
                    block = []
            last = tok.start[0]
        elif id(tok) in statements:
            body = tok.string.lstrip("rbuRBUfF")
            quotes = 3 if body.startswith(TRIPLE_QUOTES) else 1
            yield tok.start[0], body[quotes:-quotes].splitlines()
    if block:
        yield start, block


def dash_comment_chunks(text: str) -> Iterator[tuple[int, list[str]]]:
    """Blocks of ``--`` comments (Lua, SQL) on consecutive lines."""
    block: list[str] = []
    start = -1
    for number, line in enumerate(text.splitlines(), 1):
        if "--" in line and not line[:line.index("--")].count("'") % 2:
            comment = line[line.index("--"):].lstrip("-[").strip()
            if not block:
                start = number
            block.append(comment)
            if line[:line.index("--")].strip():
                yield start, block
                block = []
        elif block:
            yield start, block
            block = []
    if block:
        yield start, block


def sentences(lines: list[str]) -> Iterator[str]:
    """The prose sentences of a chunk's lines (tables, doctests and code blocks left out)."""
    paragraph: list[str] = []
    code_indent: int | None = None
    expect_code = in_rst_table = False
    for raw in [*lines, ""]:
        stripped = raw.strip()
        indent = len(raw) - len(raw.lstrip())
        if RST_TABLE_BORDER.match(stripped):
            in_rst_table = True
        if in_rst_table:
            in_rst_table = bool(stripped)
            yield from SENTENCE_END.split(" ".join(paragraph))
            paragraph = []
            continue
        if code_indent is not None:
            if not stripped or indent > code_indent:
                continue
            code_indent = None
        if expect_code and stripped:
            code_indent, expect_code = indent - 1, False
            continue
        if not stripped or stripped.startswith(("|", ">>>", "...", "$ ")) or LIST_ITEM.match(
                stripped):
            yield from SENTENCE_END.split(" ".join(paragraph))
            paragraph = [LIST_ITEM.sub("", stripped)] if LIST_ITEM.match(stripped) else []
            continue
        paragraph.append(stripped)
        if stripped.endswith("::"):
            yield from SENTENCE_END.split(" ".join(paragraph))
            paragraph, expect_code = [], True


def chunks_of(path: str) -> Iterator[tuple[int, list[str]]]:
    text = (ROOT / path).read_text(encoding="utf-8")
    if path.endswith(".py"):
        yield from python_chunks(text)
    else:
        yield from dash_comment_chunks(text)


@cache
def violations(path: str) -> list[str]:
    return [f"{path}:{line}: {what}" for line, what in chunk_violations(chunks_of(path))]


def chunk_violations(chunks: Iterator[tuple[int, list[str]]]) -> Iterator[tuple[int, str]]:
    for line, lines in chunks:
        for sentence in sentences(lines):
            words = len(sentence.split())
            if words > MAX_WORDS:
                yield line, f"a sentence of {words} words: {sentence[:60]}..."
        for match in HISTORY.finditer(" ".join(" ".join(lines).split())):
            yield line, f"history: {match.group(0)!r}"


def excluded(path: str) -> bool:
    return any(fnmatch(path, pattern) for pattern in EXCLUDED_FOR_NOW)


def test_comments_are_short_sentences_without_history() -> None:
    found = [v for f in checked_files() if not excluded(f) for v in violations(f)]
    assert not found, "comments and docstrings to rewrite:\n" + "\n".join(found)


def test_each_file_excluded_for_now_still_needs_its_rewrite() -> None:
    files = checked_files()
    for pattern in EXCLUDED_FOR_NOW:
        matched = [f for f in files if fnmatch(f, pattern)]
        assert matched, f"{pattern} names no checked file"
        assert any(violations(f) for f in matched), (
            f"{pattern} passes: remove it from EXCLUDED_FOR_NOW")


def test_the_checks_catch_what_they_are_for() -> None:
    long = "word " * (MAX_WORDS + 1)
    assert violations_of_text(f'"""{long.strip()}."""\n')
    assert not violations_of_text(f'"""{("word " * MAX_WORDS).strip()}."""\n')
    assert not violations_of_text(f'SQL = """{long}"""\n')
    assert violations_of_text("# This cache no longer keeps stale entries.\n")
    assert violations_of_text("# The loop used to\n# sleep here.\n")
    assert not violations_of_text("# The key is used to route the call.\n")
    assert not violations_of_text("# Kept no longer than its lease.\n")
    assert not violations_of_text("# Used to route the call.\n")
    table = "\n".join(f"| {'cell ' * 10} | {'cell ' * 10} |" for _ in range(5))
    assert not violations_of_text(f'"""Outcomes.\n\n{table}\n"""\n')
    items = "\n".join(f"- {'item ' * 30}" for _ in range(4))
    assert not violations_of_text(f'"""Cases.\n\n{items}\n"""\n')
    rst = "\n".join(["=====  =====", "case   outcome", "=====  =====",
                     *[f"x      {'cell ' * 10}" for _ in range(9)], "=====  ====="])
    assert not violations_of_text(f'def f() -> None:\n    """Outcomes.\n\n{rst}\n    """\n')


def violations_of_text(text: str) -> list[tuple[int, str]]:
    return list(chunk_violations(python_chunks(text)))
