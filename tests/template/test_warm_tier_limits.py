"""The deployment side of a bounded warm tier: no TTL on tierq's keys (a cache at its maximum
evicts keys with a TTL first under volatile-* policies), the alarm on the cache's used bytes
against CacheMaxDataStorageGB, and the byte bound's deployment default."""

from __future__ import annotations

import inspect
import re
from importlib import resources
from typing import Any

import yaml

from tests.support.template import TEMPLATE, CfnLoader
from tierq.dal.warm_tier import AnswersAlong

# commands and options that give a key a time to live
TTL = re.compile(r"\b(P?EXPIRE(AT)?|SETEX|PSETEX|GETEX)\b|['\"](EX|PX|EXAT|PXAT)['\"]"
                 r"|\.(p?expire(at)?|setex|psetex|getex)\(|\b(ex|px)=", re.IGNORECASE)


# The throughput chart's counts (dal/throughput.py) are the one exception, on purpose: they
# expire after their 15-minute window, and a full cache evicting them first loses chart data,
# never a task.
CHART_SCRIPTS = frozenset({"rate_add.lua", "rate_tenants.lua"})
# The limits on the HTTP API (logic/tenant_limits.py) expire too: an idle tenant keeps
# nothing, and an evicted bucket or poll count loosens a limit for a moment, never loses a
# task. They write only keys of a tenant's own hash tag, tq:{~<tenant>}, and the count of
# all callers' long polls, tq:{~}:polls.
TENANT_LIMIT_SCRIPTS = frozenset({"tenant_requests.lua", "long_polls.lua"})
# The idempotency records of claims and lease outcomes (logic/idempotency.py) expire: a
# record lost to eviction only means a repeat runs again (an ack's repeat is answered
# "rejected"), never a lost task. They write only tq:idem:{<scope>}, a hash tag of their own.
IDEMPOTENCY_SCRIPTS = frozenset({"idem_claim.lua", "idem_finish.lua"})
# Task waits' completion markers (logic/waits.py) expire: a marker lost to eviction means a
# wait begun after its task's row was deleted answers 404 rather than "done", never a lost
# task; a registration of a wait lost means that wait answers at the end of its time. The
# scripts write only the pair's `finished`, `finished_prev` and `waiters` keys.
WAIT_SCRIPTS = frozenset({"task_finished.lua", "task_wait.lua"})
# The mailbox of acks committed together (logic/ack_gathering.py) expires, and so do the
# answers its committer sends (``AnswersAlong.commands``): a mailbox, lock, state or answer lost
# to eviction means an ack waits at most its 2 s and deletes alone, never a lost task. They
# write only the pair's `acks` keys.
ACK_GATHERING_SCRIPTS = frozenset({"ack_check_join.lua", "ack_look.lua", "ack_pass.lua",
                                   "ack_mailbox.lua"})


def test_tierq_keys_carry_no_ttl() -> None:
    dal = resources.files("tierq.dal")
    sources = {entry.name: entry.read_text("utf-8")
               for entry in dal.joinpath("lua").iterdir()
               if entry.name.endswith(".lua")
               and entry.name not in CHART_SCRIPTS | TENANT_LIMIT_SCRIPTS | IDEMPOTENCY_SCRIPTS
               | WAIT_SCRIPTS | ACK_GATHERING_SCRIPTS}
    answers = inspect.getsource(AnswersAlong.commands)  # (the gathering's answers: above)
    tier = dal.joinpath("warm_tier.py").read_text("utf-8")
    assert answers in tier
    sources["warm_tier.py"] = tier.replace(answers, "")
    assert len(sources) > 10
    for name, text in sources.items():
        code = "\n".join(line.split("--")[0] if name.endswith(".lua") else line.split("#")[0]
                         for line in text.splitlines())
        assert TTL.search(code) is None, (name, TTL.search(code))


def test_the_cache_storage_alarm_watches_bytes_used_against_the_cache_maximum() -> None:
    template: dict[str, Any] = yaml.load(TEMPLATE.read_text(), Loader=CfnLoader)
    alarm = template["Resources"]["CacheStorageAlarm"]
    assert alarm["Type"] == "AWS::CloudWatch::Alarm"
    props = alarm["Properties"]
    used, percent = props["Metrics"]
    stat = used["MetricStat"]
    assert stat["Metric"]["Namespace"] == "AWS/ElastiCache"
    assert stat["Metric"]["MetricName"] == "BytesUsedForCache"
    assert stat["Metric"]["Dimensions"] == [{"Name": "clusterId",
                                             "Value": {"Ref": "ValkeyCache"}}]
    assert stat["Stat"] == "Maximum"
    assert "${CacheMaxDataStorageGB}" in percent["Expression"]["Fn::Sub"]
    assert percent["ReturnData"] is True and used["ReturnData"] is False
    assert props["Threshold"] == {"Ref": "CacheStorageAlarmPercent"}
    assert props["AlarmActions"] == [{"Ref": "AlarmTopic"}]
    cache = template["Resources"]["ValkeyCache"]["Properties"]
    assert cache["CacheUsageLimits"]["DataStorage"]["Maximum"] == {"Ref": "CacheMaxDataStorageGB"}
    assert 0 < template["Parameters"]["CacheStorageAlarmPercent"]["Default"] < 100


def test_the_byte_bound_is_a_deployment_setting() -> None:
    template: dict[str, Any] = yaml.load(TEMPLATE.read_text(), Loader=CfnLoader)
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    assert env["TIERQ_WARM_MAX_BYTES"] == {"Ref": "WarmMaxBytes"}
    assert template["Parameters"]["WarmMaxBytes"]["Default"] == 64 * 1024 * 1024


def test_only_the_chart_counts_expire() -> None:
    """The scripts that set a TTL are run by the chart's counter alone, on its own keys: the
    only data-access module that names their typed calls (dal/lua_calls.py) is
    throughput.py."""
    from tierq.dal import lua_calls

    call_names = {name: [c.__name__ for c in vars(lua_calls).values()
                         if isinstance(c, type) and getattr(c, "SCRIPT", None)
                         == name.removesuffix(".lua")]
                  for name in CHART_SCRIPTS}
    assert all(call_names.values()), call_names  # each script has its typed call
    dal = resources.files("tierq.dal")
    users: dict[str, set[str]] = {name: set() for name in CHART_SCRIPTS}
    for module in ("warm_tier.py", "throughput.py", "direct_calls.py"):
        text = dal.joinpath(module).read_text("utf-8")
        for name, calls in call_names.items():
            if any(re.search(rf"\b{call}\b", text) for call in calls) \
                    or f'script_source("{name.removesuffix(".lua")}")' in text:
                users[name].add(module)
    assert users == {name: {"throughput.py"} for name in CHART_SCRIPTS}


def test_the_tenant_limit_scripts_write_only_the_tenants_own_keys() -> None:
    lua = resources.files("tierq.dal").joinpath("lua")
    for name in TENANT_LIMIT_SCRIPTS:
        text = lua.joinpath(name).read_text("utf-8")
        keys = re.findall(r"^-- KEYS\[\d\]\s+(\S+)", text, re.MULTILINE)
        assert keys and all(key.startswith("tq:{~<tenant>}:") for key in keys), (name, keys)
        assert "KEYS[2]" not in text, name
