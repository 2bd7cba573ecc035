"""Every plain row of ``Settings`` reads a variable's text as a pydantic field of the same
type and bounds does (pydantic's lax mode, which the class replaced for a cheaper cold
import): a reference model is built from ``Settings.fields`` and both read each text of a
list of awkward ones. Rows with a rule of their own (``check``, ``strip``,
``empty_is_default``, ``pattern``) have tests of their own (test_settings_parsing.py)."""

from __future__ import annotations

import math
from typing import Any, Literal

import pytest
from pydantic import Field, ValidationError, create_model

from tierq.config import Setting, Settings, SettingsError

# Texts a deployment might set, valid or not, for numbers, booleans, choices and names.
# Left out, as differences the changelog names: a leading or trailing control character
# \x1c-\x1f (stripped from numbers here, not by pydantic) and underscores in a decimal
# number (Python's float() rules here).
TEXTS = [
    "", " ", "0", "1", "-1", "12", " 12 ", "012", "1_000", "1__0", "_1", "1_", "1e3", "1E3",
    "1.0", "1.5", "5.00", "-0", "+5", "-0.0", "1.", ".5", "True", "true", "False", "FALSE",
    "yes", "no", "on", "off", "t", "f", "y", "n", " true", "true ", "inf", "-inf", "nan",
    "NaN", "1e999", "0x10", "1,000", "\u0661\u0662", "\u00a012", "\uff11\uff12", "1 000",
    "1\n", "\t1\t", "60", "900", "901", "3600", "1000000", "0.01", "0.001", "1048576",
    "86400", "2592001", "600.0", "600.0000001", "fixed", "Fixed", "linear", "verify-full",
    "Verify-Full", "disable", "system", "default", "x" * 129, "x" * 257, "9" * 4300,
    "9" * 4301, "00", "000.000", "e3", "--1", "+-1", "None", "null",
]


def _plain(row: Setting) -> bool:
    return (row.check is None and not row.strip and not row.empty_is_default
            and row.pattern is None)


def _reference_type(row: Setting) -> Any:
    kind: Any = Literal[row.choices] if row.choices else row.kind  # type: ignore[valid-type]
    return kind | None if row.optional else kind


REFERENCE = create_model("Reference", **{  # type: ignore[call-overload]
    name: (_reference_type(row), Field(
        default=row.default, ge=row.ge, gt=row.gt, le=row.le, min_length=row.min_length,
        max_length=row.max_length, allow_inf_nan=None if row.kind is not float
        else not row.finite))
    for name, row in Settings.fields.items() if _plain(row)})


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("name", [n for n, row in Settings.fields.items() if _plain(row)])
def test_a_plain_row_reads_each_text_as_pydantic_does(name: str) -> None:
    row = Settings.fields[name]
    differ = []
    for text in TEXTS:
        try:
            expected: Any = getattr(REFERENCE.model_validate({name: text}), name)
        except ValidationError:
            expected = ValueError
        try:
            got: Any = row.parse(text)
        except ValueError:
            got = ValueError
        if not (expected is got is ValueError
                or (expected is not ValueError and got is not ValueError
                    and _same(expected, got))):
            differ.append((text[:20], expected, got))
    assert not differ, f"{row.variable}: (text, pydantic, Settings) {differ}"


def test_the_reference_covers_most_rows() -> None:
    assert len(REFERENCE.model_fields) >= len(Settings.fields) * 2 // 3
    with pytest.raises(SettingsError):
        Settings.from_environ({"TIERQ_WARM_MAX": "0"})
