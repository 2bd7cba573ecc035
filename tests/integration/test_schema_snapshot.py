"""The migrations make exactly the stored schema snapshot (shared/tierq/dal/sql/schema.sql),
and the snapshot sees what a change of schema changes (tierq.dal.schema_snapshot)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tierq.dal.schema_snapshot import (
    REGENERATE,
    main,
    migrated_scratch_database,
    migrated_snapshot,
    snapshot,
    snapshot_diff,
    stored_snapshot,
)


def test_migrating_an_empty_database_makes_the_stored_snapshot(services: Any) -> None:
    actual = migrated_snapshot(services.postgres.url)
    diff = snapshot_diff(stored_snapshot(), actual)
    assert not diff, (f"the migrations no longer make sql/schema.sql; if the change is meant, "
                      f"run `{REGENERATE}` and commit the file:\n{diff}")


def test_the_snapshot_shows_each_kind_of_change(services: Any) -> None:
    with migrated_scratch_database(services.postgres.url) as url, \
            psycopg.connect(url, autocommit=True) as conn:
        before = snapshot(conn)
        group = sql.Identifier(conn.execute("SELECT tierq_app_group()").fetchall()[0][0])
        conn.execute("ALTER TABLE tierq_queues ADD COLUMN note text NOT NULL DEFAULT 'x'")
        conn.execute("ALTER TABLE tierq_queues ADD CONSTRAINT note_short "
                     "CHECK (length(note) < 10)")
        conn.execute("CREATE INDEX tierq_queues_note ON tierq_queues (note)")
        conn.execute("ALTER TABLE tierq_idempotency SET (fillfactor = 50)")
        conn.execute(sql.SQL("REVOKE DELETE ON tierq_tasks FROM {}").format(group))
        conn.execute("GRANT EXECUTE ON FUNCTION tierq_grant_app_group() TO PUBLIC")
        conn.execute("CREATE OR REPLACE FUNCTION tierq_grant_app_group() RETURNS text "
                     "LANGUAGE plpgsql AS $$ BEGIN RETURN 'elsewhere'; END $$")
        conn.execute("ALTER SEQUENCE tierq_task_seq INCREMENT BY 64")
        after = snapshot(conn)
    diff = snapshot_diff(before, after)
    for line in ("+  column note text not null default 'x'::text",
                 "+  constraint note_short: CHECK (length(note) < 10)",
                 "+  CREATE INDEX tierq_queues_note ON tierq_queues USING btree (note)",
                 "+  options: fillfactor=50",
                 "+  grant to PUBLIC: EXECUTE",
                 "+    BEGIN RETURN 'elsewhere'; END",
                 "+  grant to <app_group>: INSERT, SELECT, UPDATE",
                 "+sequence tierq_task_seq bigint start 1 increment 64"):
        assert any(changed.startswith(line) for changed in diff.splitlines()), (line, diff)


def test_the_command_compares_and_writes(services: Any, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    from tierq.dal import schema_snapshot

    stored = stored_snapshot()
    target = tmp_path / "schema.sql"
    target.write_text("-- an old snapshot\n", encoding="utf-8")
    monkeypatch.setattr(schema_snapshot, "SNAPSHOT_PATH", target)
    server = ["--server", services.postgres.url]
    assert main(server) == 1
    out = capsys.readouterr()
    assert "-- an old snapshot" in out.out and REGENERATE in out.err
    assert main([*server, "--write"]) == 0
    assert target.read_text(encoding="utf-8") == stored
    assert main(server) == 0
