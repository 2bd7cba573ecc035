"""The local gateway's scheduler checks template.yaml's schedules against the maintenance
jobs of the registry: every job scheduled on its own function, and a schedule that runs no
registered job (or another job's function) left off with the reason said."""

from __future__ import annotations

from dataclasses import replace

from tests.support.template import REPO
from tierq.local.gateway.lambdas import LocalFunction
from tierq.local.gateway.scheduler import LocalScheduler
from tierq.local.gateway.template import Template
from tierq.maintenance.registry import jobs


def local_functions(template: Template) -> dict[str, LocalFunction]:
    return {lid: LocalFunction(spec, REPO) for lid, spec in template.functions.items()}


def test_the_template_schedules_every_job_on_its_own_function(template: Template) -> None:
    scheduler = LocalScheduler(template.schedules, local_functions(template), log=print)
    assert scheduler.unscheduled == []
    assert sorted(run.spec.payload["job"] for run in scheduler.runs) == sorted(jobs())
    assert [run.problem for run in scheduler.runs] == [None] * len(jobs())


def test_a_job_without_a_schedule_is_reported(template: Template) -> None:
    kept = [s for s in template.schedules if s.payload.get("job") != "reaper"]
    lines: list[str] = []
    scheduler = LocalScheduler(kept, local_functions(template), log=lines.append)
    assert scheduler.unscheduled == ["reaper"]
    scheduler.runs = []  # (start nothing: the report is what is checked)
    scheduler.start()
    assert lines == ["[tierq dev] maintenance job reaper has no schedule in the template: "
                     "it does not run"]


def test_a_schedule_of_no_job_or_of_another_jobs_function_is_left_off(
        template: Template) -> None:
    functions = local_functions(template)
    reaper = next(s for s in template.schedules if s.payload.get("job") == "reaper")
    unknown = replace(reaper, name="Unknown", payload={**reaper.payload, "job": "vacuum"})
    crossed = replace(reaper, name="Crossed", payload={**reaper.payload, "job": "cron_tick"})
    lines: list[str] = []
    scheduler = LocalScheduler([unknown, crossed], functions, log=lines.append)
    scheduler.start()
    assert lines[-2:] == [
        "[tierq dev] schedule Unknown is off: its input names job 'vacuum', which is not a "
        "maintenance job (known: ['cold_to_warm', 'cron_tick', 'delayed_mover', "
        "'dispatcher', 'reaper'])",
        "[tierq dev] schedule Crossed is off: it runs job 'cron_tick' on the function of "
        "'reaper'",
    ]
    assert all(run.thread is None for run in scheduler.runs)
    assert functions[reaper.function].handler is None  # not even loaded
    scheduler.stop()
