"""dal/postgres.py's array literals: PostgreSQL reads each as the list it was made from,
whatever the elements hold (a lease token's tenant is the caller's text)."""

from __future__ import annotations

import psycopg
import pytest

from tierq.dal.postgres import int_array, text_array, uuid_array

AWKWARD = ["_", "t0", "", "NULL", "null", "a,b", "{x}", '"', '\\', 'a"b\\c', " sp ", "é~ü",
           "x\\\",y", "}", "\\\\\"\"", "tab\there"]


@pytest.mark.parametrize("values", [[], ["_"], ["t1", "t2", "t1"], AWKWARD,
                                    [AWKWARD[i] for i in (4, 9, 5)]])
def test_text_arrays_read_back_as_given(database_url: str, values: list[str]) -> None:
    with psycopg.connect(database_url) as conn:
        got = conn.execute("SELECT %s::text[]", (text_array(values),)).fetchone()
    assert got == (values,)


def test_int_and_uuid_arrays_read_back_as_given(database_url: str) -> None:
    ids = ["0190c2a0-0000-7000-8000-000000000001", "0190c2a0-0000-7000-8000-000000000002"]
    with psycopg.connect(database_url) as conn:
        ints, uuids = conn.execute("SELECT %s::int[], %s::uuid[]::text[]",
                                   (int_array([3, -1, 0, 2**31 - 1]), uuid_array(ids))
                                   ).fetchone() or (None, None)
    assert (ints, uuids) == ([3, -1, 0, 2**31 - 1], ids)
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT %s::int[]", (int_array([]),)).fetchone() == ([],)
