"""Shard names, rendezvous order and id tags (tierq.dal.shards)."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from tierq.core.ids import uuid7_strings
from tierq.dal.shards import (
    ShardConfigError,
    check_names,
    parse_shard_urls,
    redact,
    rendezvous_order,
    shard_tag,
    tag_ids,
    tag_of,
)


def test_items_are_named_or_take_their_database_name() -> None:
    specs = parse_shard_urls("postgresql://h/tierq_a, blue=postgresql://u:pw@h:6/x")
    assert [(s.name, s.url) for s in specs] == [
        ("tierq-a", "postgresql://h/tierq_a"), ("blue", "postgresql://u:pw@h:6/x")]


@pytest.mark.parametrize(("text", "says"), [
    ("", "empty"),
    ("postgresql://h/a,,postgresql://h/b", "item 2 is empty"),
    ("a=postgresql://h/x,a=postgresql://h/y", "are the same"),
    ("Bad=postgresql://h/x", "lower-case"),
    ("a=mysql-ish", "not a database URL"),
    ("postgresql://h/", "names no database"),
])
def test_bad_shard_lists_are_refused_naming_the_item(text: str, says: str) -> None:
    with pytest.raises(ShardConfigError, match=says):
        parse_shard_urls(text)


def test_a_password_never_reaches_a_message() -> None:
    with pytest.raises(ShardConfigError) as error:
        parse_shard_urls("postgresql://u:secret@h/")
    assert "secret" not in str(error.value)
    assert redact("postgresql://u:secret@h:5/x") == "postgresql://u:***@h:5/x"


def test_names_with_one_tag_are_refused() -> None:
    seen: dict[int, str] = {}
    for i in range(100_000):  # two names of one 16-bit tag exist among ~300 (birthday)
        name = f"s{i}"
        if (other := seen.setdefault(shard_tag(name), name)) != name:
            break
    with pytest.raises(ShardConfigError, match="same id tag"):
        check_names([other, name])


def test_pairs_spread_evenly_and_a_new_shard_takes_only_first_places() -> None:
    three, four = ["a", "b", "c"], ["a", "b", "c", "d"]
    firsts = Counter(rendezvous_order(three, "q", f"t{i}")[0] for i in range(6000))
    assert min(firsts.values()) > 1800, firsts
    for i in range(6000):
        before, after = rendezvous_order(three, "q", f"t{i}"), rendezvous_order(four, "q", f"t{i}")
        assert [n for n in after if n != "d"] == before  # d slots in; the rest keep order


def test_a_tagged_id_keeps_its_time_order_and_tells_its_shard() -> None:
    ids = uuid7_strings(1000)
    tagged = tag_ids(ids, shard_tag("blue"))
    assert [uuid.UUID(i).version for i in tagged] == [7] * 1000
    assert {tag_of(i) for i in tagged} == {shard_tag("blue")}
    assert [i[:-4] for i in tagged] == [i[:-4] for i in ids]
    assert sorted(tagged, key=lambda i: i[:-4]) == tagged
