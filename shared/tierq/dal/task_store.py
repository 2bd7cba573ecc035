"""The one data-access class of the engine: ``TaskStore``. Its typed methods are the only
code that names the queries of ``sql/queries/*.sql`` (tests/unit/test_store_queries.py
checks it); ``tierq.logic`` and ``tierq.maintenance`` call them and never see SQL.

Each method runs on the caller's connection or transaction when given one (``conn``: a
method whose statement only makes sense inside one, such as a lock or ``FOR UPDATE``, takes
it first and requires it), and otherwise as one autocommit statement on a pooled
connection. Rows come back as NamedTuples (``tierq.dal.store.rows``). The methods live in
one mixin per part of the SQL (``tierq.dal.store``); ``StoreBase._fetch`` is the one place
a query runs."""

from __future__ import annotations

from tierq.dal.store.base import Conn, StoreBase
from tierq.dal.store.consumers import ConsumerQueries
from tierq.dal.store.feeder import FeederQueries
from tierq.dal.store.flows import FlowQueries
from tierq.dal.store.groups import GroupQueries
from tierq.dal.store.idempotency import IdempotencyQueries
from tierq.dal.store.payloads import PayloadQueries
from tierq.dal.store.registry import RegistryQueries
from tierq.dal.store.rows import Pair
from tierq.dal.store.schedules import ScheduleQueries
from tierq.dal.store.shards import ShardQueries
from tierq.dal.store.tasks import TaskColumns, TaskQueries, UniformColumns


class TaskStore(TaskQueries, RegistryQueries, ScheduleQueries, IdempotencyQueries,
                FeederQueries, ConsumerQueries, ShardQueries, FlowQueries, GroupQueries,
                PayloadQueries):
    """Every statement tierq runs on PostgreSQL, as a typed method."""


__all__ = ["Conn", "Pair", "StoreBase", "TaskColumns", "TaskStore", "UniformColumns"]
