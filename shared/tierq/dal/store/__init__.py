"""The parts of ``tierq.dal.task_store.TaskStore``: one mixin per part of the SQL, the row
types and the one runner of named queries (``base``)."""
