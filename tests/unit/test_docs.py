"""The design lives in the repository (docs/architecture.md): no code, test or document of the
project points at design documents outside it, and the links of the architecture document and
the README lead somewhere."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("shared", "tests", "bench", "spark_glue", "functions")
# Written split so that this file does not name them itself.
OUTSIDE_REFERENCES = ("DES" + "IGN §", "se" + "ed 00")
# Applied migrations cannot change: dal/migrate.py refuses to run when an applied file's
# checksum differs, so a comment in one stays as it was shipped. Each may keep exactly the
# references it had; a new migration may have none.
IMMUTABLE = {
    "shared/tierq/dal/sql/migrations/0001_tasks_and_queues.sql": 1,
    "shared/tierq/dal/sql/migrations/0002_schedules.sql": 1,
}
LINKED_DOCUMENTS = ("docs/architecture.md", "README.md")
SKIPPED_DIRECTORIES = {"__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache",
                       "node_modules"}

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.MULTILINE)


def scanned_files() -> list[Path]:
    files = []
    for top in SCANNED:
        for path in (ROOT / top).rglob("*"):
            if path.is_file() and not SKIPPED_DIRECTORIES & set(path.relative_to(ROOT).parts):
                files.append(path)
    return files


def outside_references(text: str) -> int:
    return sum(text.count(reference) for reference in OUTSIDE_REFERENCES)


def test_nothing_points_at_design_documents_outside_the_repository() -> None:
    files = scanned_files()
    assert len(files) > 100  # the walk found the project
    offenders = []
    for path in files:
        try:
            text = path.read_text("utf-8")
        except UnicodeDecodeError:
            continue  # binary
        relative = path.relative_to(ROOT).as_posix()
        found = outside_references(text)
        if found > IMMUTABLE.get(relative, 0):
            lines = [f"{relative}:{n}" for n, line in enumerate(text.splitlines(), 1)
                     if outside_references(line)]
            offenders.extend(lines)
    assert not offenders, ("point at docs/architecture.md (or say it) instead of documents "
                           f"outside the repository: {offenders}")


def test_the_immutable_exceptions_are_migrations_that_exist() -> None:
    for relative in IMMUTABLE:
        assert (ROOT / relative).is_file(), relative
        assert relative.startswith("shared/tierq/dal/sql/migrations/"), relative


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to '-'."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(markdown: Path) -> set[str]:
    text = _FENCE.sub("", markdown.read_text("utf-8"))
    return {slug(heading) for heading in _HEADING.findall(text)}


def relative_links(markdown: Path) -> list[str]:
    text = _FENCE.sub("", markdown.read_text("utf-8"))
    return [target for target in _LINK.findall(text)
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target)]  # http:, https:, mailto: …


def test_relative_links_of_the_architecture_and_the_readme_lead_somewhere() -> None:
    broken = []
    for document in LINKED_DOCUMENTS:
        source = ROOT / document
        links = relative_links(source)
        assert links, document  # the parser found the document's links
        for target in links:
            path_part, _, fragment = target.partition("#")
            destination = (source.parent / path_part).resolve() if path_part else source
            if not destination.exists():
                broken.append(f"{document}: {target} (no such file)")
            elif fragment and destination.suffix == ".md" and fragment not in anchors(
                    destination):
                broken.append(f"{document}: {target} (no such heading)")
    assert not broken, broken


def test_the_indexes_and_scripts_the_architecture_names_exist() -> None:
    text = (ROOT / "docs/architecture.md").read_text("utf-8")
    migrations = "\n".join(p.read_text("utf-8") for p in
                           sorted((ROOT / "shared/tierq/dal/sql/migrations").glob("*.sql")))
    named_indexes = set(re.findall(r"`(tierq_(?:tasks|queue_tenants)_[a-z_]+)`", text))
    assert named_indexes
    created = set(re.findall(r"CREATE (?:UNIQUE )?INDEX (?:CONCURRENTLY )?(\w+)", migrations))
    assert named_indexes <= created, named_indexes - created
    scripts = set(re.findall(r"`(\w+)\.lua`", text))
    assert scripts
    shipped = {p.stem for p in (ROOT / "shared/tierq/dal/lua").glob("*.lua")}
    assert scripts <= shipped, scripts - shipped
