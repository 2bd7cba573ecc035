"""The optional parts of tierq and the extra that installs each.

``pip install tierq`` installs what the Lambda runtime imports (the engine, ``tierq.aws``);
the command line, the HTTP client, the local stack and the AWS SDK outside Lambda come with
extras (pyproject.toml). Such a part imports its packages inside ``try`` and turns a
failure into :class:`MissingExtraError`, so a missing package fails with the command that
installs it instead of a bare ``ModuleNotFoundError``::

    try:
        import yaml
    except ModuleNotFoundError as error:
        raise MissingExtraError.from_error(error, "local", "tierq.local.gateway") from error
"""

from __future__ import annotations


class MissingExtraError(ImportError):
    """A part of tierq was imported without the extra that installs its packages."""

    def __init__(self, part: str, extra: str, module: str) -> None:
        self.part = part
        self.extra = extra
        super().__init__(
            f"{part} needs the module {module!r}, which tierq installs with its {extra!r} "
            f"extra: pip install 'tierq[{extra}]'",
            name=module,
        )

    @classmethod
    def from_error(cls, error: ModuleNotFoundError, extra: str, part: str
                   ) -> MissingExtraError:
        return cls(part, extra, error.name or str(error))
