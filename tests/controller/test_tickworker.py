"""Planning in a worker process: the same decision as on the tick thread, a lost worker
fails one tick and the next recovers, and the worker does not outlive its controller."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import subprocess
import sys
import time
from typing import Any

import psutil
import pytest

from gridctl.controller import tickworker
from gridctl.controller.collector import THRESHOLDS
from gridctl.controller.tickworker import ProcessTicks, ReplannedRows, TickWorkerLost, decide
from gridctl.tick.computing import compute_tick
from tests.controller.test_heartbeat_scale import node, quiet  # noqa: F401  (a fixture)

pytestmark = pytest.mark.anyio
DEADLINE = 60.0


def wait_gone(pid: int) -> bool:
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


async def fleet_inputs(service: Any, client: Any, clock: Any, hosts: int = 6) -> Any:
    ctl = service.controller
    for i in range(hosts):
        await node(service, client, clock, i).register()
    return ctl.gather(ctl.desired.current, clock(), preview=False)


async def test_the_worker_decides_exactly_what_the_tick_thread_decides(
    quiet: Any,  # noqa: F811
) -> None:
    service, client, clock = quiet
    ctl = service.controller
    ticks = ProcessTicks()
    try:
        async with client:
            inputs = await fleet_inputs(service, client, clock)
            here = compute_tick(inputs)
            there = ticks(inputs)
            assert there == here
            assert here.result.enqueue  # a decision with actions in it, not an empty one
            ctl.compute = ticks
            record = ctl.tick()
            assert record.ok, record.error
            assert ctl.view.plan == here.plan
            assert [name for name, _ in record.phases] == ["renew", "gather", "plan", "commit"]
            assert sum(spent for _, spent in record.phases) <= record.duration_ms
    finally:
        ticks.close()


async def test_rows_stay_in_the_worker_and_the_parent_builds_them_once_when_read(
    quiet: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service, client, clock = quiet
    async with client:
        inputs = await fleet_inputs(service, client, clock)
    here = compute_tick(inputs)
    assert all(len(e.candidates) == 6 for e in here.plan.explanations)  # a row per host
    # what crosses back: no row, the summary the status documents show
    answer = decide(inputs)
    assert [e.candidates for e in answer.plan.explanations] == [()] * len(answer.summaries)
    assert list(answer.summaries) == [e.summary() for e in here.plan.explanations]
    assert answer.shared and answer.portfolio is not None
    assert answer.portfolio.plan is answer.plan
    # the parent plans the same inputs again on the first read of any model's rows, once
    runs: list[int] = []

    def counted(again: Any) -> Any:
        runs.append(1)
        return compute_tick(again)

    monkeypatch.setattr(tickworker, "compute_tick", counted)
    plan = tickworker.with_rows(answer.plan, answer.summaries, ReplannedRows(inputs))
    assert [e.summary() for e in plan.explanations] == list(answer.summaries)
    assert runs == []  # summaries need no rows
    for mine, theirs in zip(plan.explanations, here.plan.explanations, strict=True):
        assert tuple(mine.candidates) == tuple(theirs.candidates)
    assert runs == [1]


async def test_a_killed_worker_fails_one_tick_and_the_next_starts_another(
    quiet: Any,  # noqa: F811
) -> None:
    service, client, clock = quiet
    ctl = service.controller
    ticks = ProcessTicks()
    try:
        async with client:
            await fleet_inputs(service, client, clock)
            first = ticks.start()
            ctl.compute = ticks
            os.kill(first, signal.SIGKILL)
            assert wait_gone(first)
            processed = ctl.revisions["processed"]
            record = ctl.tick()
            assert not record.ok
            assert record.error is not None and "planning process exited" in record.error
            assert ctl.revisions["success"] < ctl.revisions["dirty"]  # covered nothing
            assert ctl.revisions["processed"] >= processed
            assert ticks.restarts == 1
            record = ctl.tick()
            assert record.ok, record.error
            assert ctl.revisions["success"] == ctl.revisions["dirty"]
            second = ticks.start()
            assert second != first
    finally:
        ticks.close()


def test_a_lost_worker_is_named_when_called_directly() -> None:
    ticks = ProcessTicks()
    try:
        pid = ticks.start()
        os.kill(pid, signal.SIGKILL)
        assert wait_gone(pid)
        with pytest.raises(TickWorkerLost, match="planning process exited"):
            ticks(None)  # type: ignore[arg-type]  # never reaches the worker
    finally:
        ticks.close()


def test_the_worker_plans_with_the_collector_settled() -> None:
    ticks = ProcessTicks()
    try:
        ticks.start()
        pool = ticks._executor()
        assert pool.submit(gc.get_threshold).result() == THRESHOLDS
        assert pool.submit(gc.get_freeze_count).result() > 0  # what it imported is frozen
    finally:
        ticks.close()


PARENT = """
import sys
from gridctl.controller.tickworker import ProcessTicks

if __name__ == "__main__":
    ticks = ProcessTicks()
    print(ticks.start(), flush=True)
    sys.stdin.read()
"""


def test_the_worker_exits_when_its_controller_is_killed(tmp_path: Any) -> None:
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen(
        [sys.executable, str(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        worker = int(parent.stdout.readline())
        assert psutil.Process(worker).ppid() == parent.pid
        parent.kill()
        parent.wait(timeout=DEADLINE)
        assert wait_gone(worker), f"worker {worker} outlived its SIGKILLed parent"
    finally:
        if parent.poll() is None:
            parent.kill()


async def test_the_service_serves_and_ticks_while_its_planning_process_starts(
    tmp_path: Any,
) -> None:
    """Startup does not wait for the planning process: ticks plan on the tick thread until
    the child has imported the planner, then in the child; stopping stops the child."""
    import httpx

    from tests.controller.simnodes import sim_service
    from tests.controller.test_http_flow import POLICY, profile

    files = {"gemma.yaml": profile("gemma"), "policy.yaml": POLICY}
    service, clock = sim_service(tmp_path, files, plan_in_worker=True)
    app = service.build_app()
    ctl = service.controller
    async with app.router.lifespan_context(app):
        assert service.ticks is not None  # started, maybe not yet answering
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://c")
        async with client:
            await fleet_inputs(service, client, clock, hosts=2)
            record = ctl.tick()  # whichever computes it, the tick succeeds
            assert record.ok, record.error
            end = time.monotonic() + DEADLINE
            while ctl.compute is not service.ticks and time.monotonic() < end:
                await asyncio.sleep(0.05)
            ticks = service.ticks
            assert ctl.compute is ticks, "the planning process never took over"
            worker = ticks.start()  # the running child's pid (no new child)
            assert psutil.Process(worker).ppid() == os.getpid()
            await node(service, client, clock, 9).register()  # a new input
            record = ctl.tick()
            assert record.ok, record.error
            assert ticks.start() == worker and ticks.restarts == 0
    assert service.ticks is None and ctl.compute is compute_tick
    assert wait_gone(worker), f"planning process {worker} outlived its service"
