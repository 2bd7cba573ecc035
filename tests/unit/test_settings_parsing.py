"""``tierq.config.Settings`` parses and checks its variables as pydantic's lax mode does, and
a bad value is refused with one ``SettingsError`` naming every bad variable.

The parsing rules are compared with pydantic's own on the same texts, so that a deployment's
variables mean what they meant under a pydantic model.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from tierq.config import FALSE_WORDS, TRUE_WORDS, Setting, Settings, SettingsError

INTEGER_TEXTS = ["12", " 12 ", "\t7\n", "+5", "-0", "0012", "1_000", "0_0", "5.00", "1_0.0",
                 "-1.0", "1.5", "1e3", "0x10", "", "  ", "abc", "1.", ".0", "1__0", "_1", "1_",
                 "+ 5", "1.0_0", "1,000", "\u0661\u0662", "1.0.0", "9" * 5000]
NUMBER_TEXTS = ["1.5", " 2 ", "1e3", "1E-3", ".5", "5.", "+.5", "1_0.5", "1_000", "inf",
                "-Infinity", "nan", "1e999", "", "abc", "0x1", "1__0.5", "_1.5", "1e",
                "\u0663", "infinit"]
BOOLEAN_TEXTS = [*sorted(TRUE_WORDS), *sorted(FALSE_WORDS), "TRUE", "False", "Yes", "oN", "T",
                 "N", " true ", "true ", "2", "-1", "", "ok", "truee"]


def row(kind: str) -> Setting:
    return Settings.fields[{"int": "warm_max", "float": "backoff_jitter",
                            "bool": "valkey_cluster"}[kind]]


def pydantic_reads(kind: type, text: Any) -> tuple[bool, Any]:
    try:
        return True, TypeAdapter(kind).validate_python(text)
    except ValidationError:
        return False, None


def ours_read(setting: Setting, text: Any) -> tuple[bool, Any]:
    from tierq.config import _PARSERS

    try:
        return True, _PARSERS[setting.kind](text)
    except Exception:
        return False, None


@pytest.mark.parametrize("text", INTEGER_TEXTS)
def test_an_integer_is_read_as_pydantic_reads_it(text: str) -> None:
    assert ours_read(row("int"), text) == pydantic_reads(int, text)


@pytest.mark.parametrize("text", NUMBER_TEXTS)
def test_a_number_is_read_as_pydantic_reads_it(text: str) -> None:
    ours, theirs = ours_read(row("float"), text), pydantic_reads(float, text)
    assert ours[0] == theirs[0]
    assert repr(ours[1]) == repr(theirs[1])  # (nan == nan is false)


@pytest.mark.parametrize("text", BOOLEAN_TEXTS)
def test_a_boolean_is_read_as_pydantic_reads_it(text: str) -> None:
    assert ours_read(row("bool"), text) == pydantic_reads(bool, text)


@pytest.mark.parametrize(("kind", "value"), [
    (int, 5), (int, 5.0), (int, 5.5), (int, True), (int, float("inf")), (int, None),
    (float, 3), (float, True), (float, None), (bool, 1), (bool, 0), (bool, 2), (bool, 1.0),
    (bool, None), (str, 5), (str, True), (str, None),
])
def test_a_keywords_value_is_taken_as_pydantic_takes_it(kind: type, value: Any) -> None:
    setting = Setting("X", None)
    setting.kind = kind
    assert ours_read(setting, value) == pydantic_reads(kind, value)


def test_values_are_parsed_and_stripped_as_their_rows_say() -> None:
    settings = Settings.from_environ({
        "TIERQ_WARM_MAX": " 1_000.00 ", "valkey_cluster": "On", "TIERQ_BACKOFF_JITTER": "1e-1",
        "TIERQ_TENANT_WARM_MAX_BYTES": " ", "AWS_REGION": " eu-west-1 ", "DATABASE_URL": "",
        "TIERQ_DB_POOL_TIMEOUT": "inf"})
    assert (settings.warm_max, settings.valkey_cluster, settings.backoff_jitter) == (1000, True,
                                                                                     0.1)
    assert settings.tenant_warm_max_bytes is None  # empty is unset
    assert settings.region == "eu-west-1"
    assert settings.database_url == ""  # (text is kept as given, empty too)
    assert settings.db_pool_timeout == float("inf")  # only the tick limits must be finite
    assert Settings(tenant_warm_max_bytes=None).tenant_warm_max_bytes is None


def test_keywords_win_by_variable_then_by_name_and_others_are_ignored() -> None:
    environ = {"db_port": "5433", "TIERQ_WARM_MAX": "7"}
    assert Settings.from_environ(environ).db_port == 5433  # any case in the environment
    assert Settings.from_environ(environ, db_port=1).db_port == 1
    assert Settings.from_environ(environ, DB_PORT=2, db_port=1).db_port == 2
    assert Settings.from_environ(environ, db_PORT=3, no_such_field=4).db_port == 5433


def test_a_copy_is_checked_and_knows_its_fields() -> None:
    settings = Settings.from_environ({"DB_HOST": "a"})
    other = settings.replace(db_host="b", DB_NAME="other")
    assert (other.db_host, other.db_name, settings.db_host) == ("b", "other", "a")
    assert settings.replace() == settings and other != settings
    with pytest.raises(SettingsError, match="TIERQ_WARM_MAX must be greater than or equal"):
        settings.replace(warm_max=0)
    with pytest.raises(TypeError, match="warm_mx"):
        settings.replace(warm_mx=5)


def test_the_table_names_one_upper_case_variable_per_field_and_valid_defaults() -> None:
    variables = [row.variable for row in Settings.fields.values()]
    assert len(set(variables)) == len(variables) == len(Settings.fields)
    assert all(v == v.upper() for v in variables)
    for name, setting in Settings.fields.items():
        assert setting.name == name
        assert setting.default is None or setting.parse(setting.default) == setting.default, name
    bounds = Settings.fields["long_polls_percent"]
    assert (bounds.variable, bounds.default, bounds.ge, bounds.le) == (
        "TIERQ_LONG_POLLS_PERCENT", 80, 1, 100)
    assert Settings.fields["db_sslmode"].choices[-1] == "verify-full"


@pytest.mark.parametrize(("environ", "message"), [
    ({"DB_PORT": "1.5"}, "DB_PORT must be a valid integer, got '1.5'"),
    ({"TIERQ_WARM_MAX": "0"}, "TIERQ_WARM_MAX must be greater than or equal to 1, got '0'"),
    ({"TIERQ_DISPATCHER_EVERY": "61"},
     "TIERQ_DISPATCHER_EVERY must be less than or equal to 60, got '61'"),
    ({"TIERQ_DELAYED_EVERY": "0"}, "TIERQ_DELAYED_EVERY must be greater than 0, got '0'"),
    ({"TIERQ_BACKOFF_KIND": "Fixed"},
     "TIERQ_BACKOFF_KIND must be one of 'fixed', 'linear', 'exponential', got 'Fixed'"),
    ({"VALKEY_CLUSTER": "maybe"}, "VALKEY_CLUSTER must be a valid boolean (true/false, 1/0, "
                                  "yes/no, on/off, t/f, y/n), got 'maybe'"),
    ({"TIERQ_BACKOFF_JITTER": "ten"}, "TIERQ_BACKOFF_JITTER must be a valid number, got 'ten'"),
    ({"TIERQ_TICK_MAX_SECONDS": "inf"},
     "TIERQ_TICK_MAX_SECONDS must be a finite number, got 'inf'"),
    ({"DB_SSLROOTCERT": ""}, "DB_SSLROOTCERT must have at least 1 character, got ''"),
    ({"TIERQ_TENANT_CLAIM": "a b"},
     "TIERQ_TENANT_CLAIM must be one word without spaces, got 'a b'"),
    ({"TIERQ_TENANT_WARM_MAX_BYTES": "1000"},
     "TIERQ_TENANT_WARM_MAX_BYTES must be 0 (no bound) or at least 1048576 (1 MiB), got 1000"),
    ({"TIERQ_SHARD_NAMES": "default,Blue"}, "TIERQ_SHARD_NAMES: shard name 'Blue': use"),
    ({"DB_SSLMODE": "verify-ca"}, "DB_SSLROOTCERT=system needs DB_SSLMODE=verify-full"),
])
def test_a_bad_value_is_one_line_naming_the_variable_the_value_and_the_rule(
        environ: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as refused:
        Settings.from_environ(environ)
    assert isinstance(refused.value, ValueError)
    assert str(refused.value).startswith(message)
    assert len(refused.value.problems) == 1


def test_a_long_value_is_shortened_in_the_message() -> None:
    with pytest.raises(SettingsError) as refused:
        Settings.from_environ({"POWERTOOLS_SERVICE_NAME": "x" * 1000})
    assert str(refused.value).startswith(
        "POWERTOOLS_SERVICE_NAME must have at most 255 characters, got 'xxx")
    assert len(str(refused.value)) < 150


def test_every_bad_value_is_in_the_one_error() -> None:
    with pytest.raises(SettingsError) as refused:
        Settings.from_environ({
            "DB_PORT": "x", "TIERQ_WARM_MAX": "0", "DB_SSLMODE": "none",
            "VALKEY_CLUSTER": "maybe", "TIERQ_PAYLOAD_URL_SECONDS": "30",
            # a rule between two values, one of them refused, is not checked
            "TIERQ_PAYLOAD_PENDING_SECONDS": "60",
            # one between two good values is, beside the bad values
            "TIERQ_STATEMENT_TIMEOUT_MS": "1000", "TIERQ_LOCK_TIMEOUT_MS": "2000"})
    assert str(refused.value) == "\n".join([  # (in the table's order, the rules after)
        "6 bad settings:",
        "  DB_PORT must be a valid integer, got 'x'",
        "  DB_SSLMODE must be one of 'disable', 'allow', 'prefer', 'require', 'verify-ca', "
        "'verify-full', got 'none'",
        "  VALKEY_CLUSTER must be a valid boolean (true/false, 1/0, yes/no, on/off, t/f, y/n), "
        "got 'maybe'",
        "  TIERQ_WARM_MAX must be greater than or equal to 1, got '0'",
        "  TIERQ_PAYLOAD_URL_SECONDS must be greater than or equal to 60, got '30'",
        "  TIERQ_LOCK_TIMEOUT_MS (2000) must not exceed TIERQ_STATEMENT_TIMEOUT_MS (1000)",
    ])


def test_the_rules_between_values_are_all_reported() -> None:
    with pytest.raises(SettingsError) as refused:
        Settings.from_environ({"DB_SSLMODE": "verify-ca", "VALKEY_IAM_USER": "u",
                               "TIERQ_BACKOFF_CAP_SECONDS": "1",
                               "TIERQ_PAYLOAD_URL_SECONDS": "3600",
                               "TIERQ_PAYLOAD_PENDING_SECONDS": "600"})
    assert [p.split()[0] for p in refused.value.problems] == [
        "TIERQ_PAYLOAD_PENDING_SECONDS", "DB_SSLROOTCERT=system", "VALKEY_IAM_USER",
        "TIERQ_BACKOFF_CAP_SECONDS"]


def test_a_settings_error_survives_pickling_and_copying() -> None:
    import copy
    import pickle

    with pytest.raises(SettingsError) as refused:
        Settings.from_environ({"DB_PORT": "x", "TIERQ_WARM_MAX": "0"})
    error = refused.value
    for again in (pickle.loads(pickle.dumps(error)), copy.copy(error)):
        assert again.problems == error.problems and str(again) == str(error)


def test_a_misspelt_attribute_is_refused() -> None:
    settings = Settings.from_environ({})
    settings.warm_max = 7  # (a field: set as before)
    with pytest.raises(AttributeError, match="warm_mx"):
        settings.warm_mx = 5  # type: ignore[attr-defined]
