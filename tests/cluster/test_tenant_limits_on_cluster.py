"""A tenant's limits on a cluster: its keys share the tenant's own hash tag, so each script
runs in one slot, whichever master serves it; tenants on every master are counted apart. The
count of all callers' long polls has a slot of its own (``{~}``), apart from the tenants'."""

from __future__ import annotations

import pytest

from tierq.dal.warm_tier import ALL_POLLS_KEY, TenantKeys
from tierq.errors import TooManyRequests
from tierq.logic import tenant_limits


def test_each_tenants_limits_on_its_own_master(make_tq, valkey) -> None:
    tq = make_tq(tenant_requests_per_second=0.5, tenant_requests_burst=2, tenant_long_polls=1)
    masters: dict[str, str] = {}
    for i in range(200):  # a tenant on each master
        tenant = f"t{i}"
        node = valkey.get_node_from_key(TenantKeys.of(tenant).requests)
        masters.setdefault(f"{node.host}:{node.port}", tenant)
        if len(masters) == len(valkey.get_primaries()):
            break
    assert len(masters) >= 3
    for tenant in masters.values():
        keys = TenantKeys.of(tenant)
        assert valkey.keyslot(keys.requests) == valkey.keyslot(keys.polls)
        tenant_limits.admit_request(tq.ctx, tenant)
        tenant_limits.admit_request(tq.ctx, tenant)
        with pytest.raises(TooManyRequests):
            tenant_limits.admit_request(tq.ctx, tenant)
        with tenant_limits.long_poll(tq.ctx, tenant), pytest.raises(TooManyRequests), \
                tenant_limits.long_poll(tq.ctx, tenant):
            pass
        assert valkey.zcard(keys.polls) == 0


def test_all_callers_long_polls_are_counted_in_their_own_slot(make_tq, valkey) -> None:
    tq = make_tq(tenant_requests_per_second=0, tenant_long_polls=5,
                 claim_reserved_concurrency=4, long_polls_percent=50)  # 2 in all
    everyone = valkey.get_node_from_key(ALL_POLLS_KEY)
    others = [t for t in (f"t{i}" for i in range(200))
              if valkey.get_node_from_key(TenantKeys.of(t).polls) != everyone][:3]
    assert len(others) == 3  # tenants whose places live on another master
    first, second, third = others
    with tenant_limits.long_poll(tq.ctx, first), tenant_limits.long_poll(tq.ctx, second):
        assert valkey.zcard(ALL_POLLS_KEY) == 2
        with pytest.raises(TooManyRequests, match="in flight, the most"), \
                tenant_limits.long_poll(tq.ctx, third):
            pass
        assert valkey.zcard(TenantKeys.of(third).polls) == 0  # given back, on its master
    assert valkey.zcard(ALL_POLLS_KEY) == 0
    for tenant in others:
        assert valkey.zcard(TenantKeys.of(tenant).polls) == 0
