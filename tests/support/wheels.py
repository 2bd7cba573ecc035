"""Wheels made from this environment's installed distributions: how the tests of the Glue
job's zip of wheels get the packages it pins without a network (the pip cache is empty, and
the index is not to be reached from a test)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement

# Glue 5.0's interpreter and platform, for the requirements' markers
GLUE_MARKERS = {"python_version": "3.11", "python_full_version": "3.11.6",
                "sys_platform": "linux", "platform_system": "Linux",
                "platform_machine": "x86_64", "os_name": "posix",
                "implementation_name": "cpython", "platform_python_implementation": "CPython"}
_SKIPPED = re.compile(r"\.dist-info/(INSTALLER|REQUESTED|RECORD|direct_url\.json)$")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _applies(requirement: Requirement, extra: str) -> bool:
    marker: Marker | None = requirement.marker
    return marker is None or marker.evaluate({**GLUE_MARKERS, "extra": extra})


def closure(requirements: Iterable[str]) -> dict[str, str]:
    """Every distribution the requirements need on Glue's interpreter, as installed here:
    canonical name -> installed version."""
    found: dict[str, str] = {}
    todo = [(Requirement(text), "") for text in requirements]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        requirement, extra = todo.pop()
        if not _applies(requirement, extra):
            continue
        name = canonical(requirement.name)
        key = (name, frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        dist = metadata.distribution(name)
        found[name] = dist.version
        for text in dist.requires or []:
            child = Requirement(text)
            if child.marker is None or any(
                    child.marker.evaluate({**GLUE_MARKERS, "extra": e})
                    for e in ("", *requirement.extras)):
                todo.append((Requirement(str(child).split(";")[0]), ""))
    return found


def repack(name: str, out: Path) -> Path:
    """A wheel of the installed distribution ``name`` (its files as RECORD lists them, its
    tags from its WHEEL file), written into ``out``."""
    from build_modules import write_wheel  # spark_glue/, on the path in tests/spark

    dist = metadata.distribution(name)
    info = next(str(f).split("/")[0] for f in dist.files or [] if ".dist-info/" in str(f))
    wheel_text = dist.read_text("WHEEL") or ""
    tags = [line.split(":", 1)[1].strip() for line in wheel_text.splitlines()
            if line.startswith("Tag:")]
    python, abi, platform = (".".join(dict.fromkeys(parts)) for parts in
                             zip(*(tag.split("-") for tag in tags), strict=True))
    files: list[tuple[str, bytes]] = []
    for entry in dist.files or []:
        path = str(entry)
        if path.startswith("..") or "__pycache__" in path or _SKIPPED.search(path):
            continue
        files.append((path, Path(str(dist.locate_file(entry))).read_bytes()))
    stem = f"{canonical(dist.metadata['Name']).replace('-', '_')}-{dist.version}"
    out.mkdir(parents=True, exist_ok=True)
    return write_wheel(out / f"{stem}-{python}-{abi}-{platform}.whl", files, info)
