"""Smoke run of bench.batch_acks (seconds): both forms of the plain ack end every member of
every order (the benchmark itself fails otherwise), and the run ends with a ratio an order.
Numbers are not judged here."""

from __future__ import annotations

import re
from pathlib import Path

from tests.bench.test_bench_smoke import run_bench
from tierq.local.services import LocalServices


def test_batch_acks_bench_prints_a_ratio_an_order(services: LocalServices,
                                                  tmp_path: Path) -> None:
    lines, result = run_bench("bench.batch_acks", services, tmp_path / "acks.json",
                              "--rounds", "1")
    names = ["tenant_rows_vs_mixed_rows", "grouped_vs_alone_a_batch_row_a_tenant",
             "grouped_vs_alone_ten_tenants", "grouped_vs_alone_one_tenant"]
    for line, name in zip(lines[-4:], names, strict=True):
        assert re.fullmatch(rf"{name}=\d+\.\d\d", line), line
    assert set(result["per_member"]) == {"one tenant", "ten tenants", "a batch row a tenant"}
    for order in result["per_member"].values():
        assert order["v2"] > 0 and order["v3"] > 0
