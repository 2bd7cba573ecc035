"""The Glue entry point (``jobs/feed_queue.py`` under Glue): job parameters through the real
``getResolvedOptions``, the GlueContext, bookmarked reads and ``job.commit()`` only after a
run that deferred nothing — against a stand-in whose signatures are those of the public
``awsglue`` interfaces (the awsglue-dev package), so a wrong call fails here."""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from moto import mock_aws

from tests.spark import glue_standin
from tests.spark.data import write_parquet
from tests.spark.test_feed_back_pressure import consume, keys_in_line
from tests.spark.test_feed_job import entry_point
from tierq.engine import Tierq

pytestmark = pytest.mark.spark


def real(module: str, qualified: str) -> Any:
    target: Any = importlib.import_module(module)
    for part in qualified.split("."):
        target = getattr(target, part)
    return target


@pytest.mark.parametrize("stand_in", list(glue_standin.MIRRORS), ids=lambda f: f.__qualname__)
def test_the_stand_in_has_the_signatures_of_awsglue(stand_in: Any) -> None:
    module, qualified = glue_standin.MIRRORS[stand_in]
    assert stand_in.__qualname__ == qualified
    assert inspect.signature(stand_in) == inspect.signature(real(module, qualified))


def test_the_signature_check_sees_a_difference() -> None:
    """(The comparison above is of names, kinds and defaults.)"""
    def init(self, job_name, arguments={}):  # type: ignore[no-untyped-def]  # noqa: B006
        pass

    assert inspect.signature(init) != inspect.signature(real("awsglue.job", "Job.init"))


def test_the_entry_point_is_local_without_job_name() -> None:
    job = entry_point()
    assert not job.under_glue(["--queue", "q"])
    assert job.under_glue(["--JOB_NAME", "feed", "--feed_args", "--queue q"])


def glue_argv(feed_args: str, stores: Any, tmp_path: Path, *, bookmarks: bool) -> list[str]:
    argv = ["feed_queue.py", "--JOB_NAME", "feed-orders", "--JOB_RUN_ID", "jr_1",
            "--feed_args", feed_args, "--TempDir", str(tmp_path / "temp"),
            "--DATABASE_URL", stores.database_url, "--VALKEY_URL", stores.valkey_url]
    if bookmarks:
        argv += ["--job-bookmark-option", "job-bookmark-enable"]
    return argv


def run_glue(argv: list[str], monkeypatch: pytest.MonkeyPatch,
             capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        code = entry_point().main()
    return code, capsys.readouterr().out.strip().splitlines()[-1]


def test_glue_run_with_bookmarks_commits_only_when_nothing_is_deferred(
        spark: Any, stores: Any, tmp_path: Path, engine: Tierq, database_url: str,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "in"
    write_parquet(spark, folder, [{"id": f"a{i}", "n": i} for i in range(4)], first_file=1)
    write_parquet(spark, folder, [{"id": f"b{i}", "n": i} for i in range(2)], first_file=2)
    feed_args = f"--queue orders --source 'in={folder}/:parquet' --key-column id " \
                "--max-backlog 5"
    argv = glue_argv(feed_args, stores, tmp_path, bookmarks=True)
    with glue_standin.installed(monkeypatch):
        bookmarks = lambda: glue_standin.BOOKMARKS["feed-orders"]  # noqa: E731
        code, last = run_glue(argv, monkeypatch, capsys)
        assert (code, last) == (0, "created=5 ignored=0 deferred=1 rejected=0")
        assert bookmarks().commits == 0  # a row waits: the bookmark stays where it was

        assert consume(engine, "orders", 5) == ["a0", "a1", "a2", "a3", "b0"]
        code, last = run_glue(argv, monkeypatch, capsys)
        assert (code, last) == (0, "created=1 ignored=0 deferred=0 rejected=0")
        # both files were given again (nothing committed); the offsets skipped what was fed
        assert [len(files) for _ctx, files in bookmarks().reads] == [2, 2]
        assert bookmarks().commits == 1

        write_parquet(spark, folder, [{"id": "c0", "n": 0}], first_file=3)
        code, last = run_glue(argv, monkeypatch, capsys)
        assert (code, last) == (0, "created=1 ignored=0 deferred=0 rejected=0")
        assert [Path(f).name for f in bookmarks().reads[-1][1]] == ["part-00003.parquet"]
        assert bookmarks().reads[-1][0] == "source_in"
    assert keys_in_line(database_url, "orders")[-2:] == ["b1", "c0"]


def test_glue_run_without_bookmarks_and_its_rejects_under_temp_dir(
        spark: Any, stores: Any, tmp_path: Path, database_url: str,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_parquet(spark, tmp_path / "in", [{"id": "x", "p": 1}, {"id": "y", "p": 12}])
    argv = glue_argv(f"--queue plain --source in={folder} --key-column id "
                     "--priority-column p", stores, tmp_path, bookmarks=False)
    with glue_standin.installed(monkeypatch):
        code, last = run_glue(argv, monkeypatch, capsys)
        assert glue_standin.BOOKMARKS == {}
    assert (code, last) == (0, "created=1 ignored=0 deferred=0 rejected=1")
    assert list((tmp_path / "temp" / "tierq-rejects" / "plain").glob("part-*.json"))
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT key FROM tierq_tasks WHERE queue = 'plain'").fetchall() \
            == [("x",)]


def test_glue_run_with_bad_feed_args_writes_nothing(
        spark: Any, stores: Any, tmp_path: Path, database_url: str,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    argv = glue_argv("--queue q --source in=/nowhere.parquet", stores, tmp_path,
                     bookmarks=True)
    monkeypatch.setattr(sys, "argv", argv)
    with glue_standin.installed(monkeypatch):
        assert entry_point().main() == 2
    assert "error: arguments: the following arguments are required: --key-column" in \
        capsys.readouterr().err
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM tierq_tasks").fetchone() == (0,)
