"""The command executor: one side effect at a time, off the heartbeat thread.

A warm can take minutes and an unload waits for idle slots; heartbeats must keep
flowing meanwhile, so admitted commands run on one worker thread, strictly in
order. At the durable action-start boundary the executor re-checks what may have
changed since admission — the authority deadline, the dependencies' receipts and
the local admission decision — then writes ``running`` before acting and the
terminal receipt (with a monotonic duration and ``artifact_fetched``) after.
After a restart, receipts left ``accepted`` or ``running`` are marked failed.
A warm carrying ``split_serve`` passes the split load fence (``splitserve``) first;
split claims and releases go to the stage host (``stagecommands``).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gridctl.domain.states import HostState
from gridctl.errors import GridctlError
from gridctl.logs import command_fields
from gridctl.node.actuator import HostActuator
from gridctl.node.intake import Admitted
from gridctl.node.lifecycle import LifecycleRequest, Outcome
from gridctl.node.splitserve import coordinator_warm
from gridctl.node.stagecommands import SPLIT_KINDS, StageAnswer, run_split_command
from gridctl.node.stagehost import StageHost

log = logging.getLogger("gridctl.node")

CONSTRUCTIVE = ("load", "warm", "split_claim")


def lifecycle_request(command: dict[str, Any]) -> LifecycleRequest:
    return LifecycleRequest(
        kind=str(command["kind"]),
        model_id=str(command["model_id"]),
        memory_mb=int(command.get("memory_mb") or 0),
        artifact_sha256=command.get("artifact_sha256"),
        artifact_source=command.get("artifact_source"),
        artifact_size_mb=command.get("artifact_size_mb"),
        artifact_mirrors=tuple(str(m) for m in command.get("artifact_mirrors") or ()),
        prefetch=bool(command.get("prefetch", False)),
        chat_template=command.get("chat_template"),
        embeddings="embeddings" in (command.get("endpoints") or ()),
        force=bool(command.get("force", False)),
        runtime=command.get("runtime"),
    )


class CommandExecutor:
    """Runs admitted commands sequentially on a worker thread."""

    def __init__(
        self,
        actuator: HostActuator,
        host_state: Callable[[], HostState],
        *,
        monotonic: Callable[[], float] = time.monotonic,
        clock: Callable[[], float] = time.time,
        stages: StageHost | None = None,
    ) -> None:
        self.actuator, self.store = actuator, actuator.store
        self.stages = stages  # the split stage host, when this node can serve stages
        self.host_state = host_state
        self.monotonic, self.clock = monotonic, clock
        self._queue: queue.Queue[Admitted | None] = queue.Queue()
        self._running: str | None = None
        self._stopping = threading.Event()
        self.changed = threading.Event()  # set whenever a receipt reaches a new status
        self._thread = threading.Thread(target=self._work, name="gridctl-executor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def recover(self) -> int:
        """Mark actions a restart interrupted as failed; return how many."""
        count = 0
        for receipt in self.store.receipts(limit=100_000):
            if receipt.status in ("accepted", "running"):
                self.store.put_receipt(
                    replace(
                        receipt,
                        status="failed",
                        reason="interrupted_by_restart",
                        message="the node restarted before this action finished",
                        finished_at=self.clock(),
                        acked=False,
                    )
                )
                count += 1
        return count

    def submit(self, admitted: Admitted) -> None:
        self._queue.put(admitted)

    @property
    def idle(self) -> bool:
        return self._running is None and self._queue.empty()

    @property
    def running_action(self) -> str | None:
        return self._running

    def stop(self, timeout: float = 30.0) -> None:
        """Stop taking work; queued actions are cancelled, the running one may finish."""
        self._stopping.set()
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                self._finish(item.command, "cancelled", "node_stopping", "node stopping", None)
        self._queue.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout)

    # --- worker -----------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self._stopping.is_set():
                self._finish(item.command, "cancelled", "node_stopping", "node stopping", None)
                continue
            self._running = str(item.command["action_id"])
            try:
                self._execute(item)
            except Exception as exc:  # never let one action kill the worker
                log.exception("action %s crashed", self._running)
                self._finish(item.command, "failed", "node_error", str(exc)[:1024], None)
            finally:
                self._running = None

    def _refusal(self, item: Admitted) -> tuple[str, str, str] | None:
        command = item.command
        if item.deadline is not None and self.monotonic() >= item.deadline:
            return "rejected", "expired_ttl", "controller authority expired before start"
        for dependency in command.get("dependencies") or []:
            done = self.store.receipt(str(dependency))
            if done is None or done.status != "succeeded":
                got = "unknown" if done is None else done.status
                return "rejected", "dependency_not_succeeded", f"dependency {dependency}: {got}"
        state = self.host_state()
        if command["kind"] in CONSTRUCTIVE and not state.admits_new_work:
            return "cancelled", "local_admission_closed", f"host is {state.value}"
        return None

    def _execute(self, item: Admitted) -> None:
        command = item.command
        refusal = self._refusal(item)
        if refusal is not None:
            self._finish(command, *refusal, None)
            return
        self._mark_running(command)
        started = self.monotonic()
        if command["kind"] in SPLIT_KINDS:
            answer = run_split_command(self.stages, command, int(self.clock() * 1000))
            duration = self.monotonic() - started
            self._finish(command, answer.status, answer.reason, answer.message, duration)
            return
        request = lifecycle_request(command)
        if command["kind"] == "warm" and "split_serve" in command:
            # a split's coordinator: fenced on this host's own claim before anything starts
            launch = coordinator_warm(self.stages, command, int(self.clock() * 1000))
            if isinstance(launch, StageAnswer):
                duration = self.monotonic() - started
                self._finish(command, launch.status, launch.reason, launch.message, duration)
                return
            request = replace(request, split=launch)
        try:
            outcome = self._dispatch(request)
        except GridctlError as exc:
            reason = getattr(exc, "reason", type(exc).__name__)
            duration = self.monotonic() - started
            self._finish(command, "failed", str(reason), str(exc)[:4096], duration)
            return
        duration = self.monotonic() - started
        self._finish(command, "succeeded", "", outcome.message, duration, outcome.artifact_fetched)

    def _dispatch(self, request: LifecycleRequest) -> Outcome:
        actuator = self.actuator
        if request.kind == "load":
            return actuator.load(request)
        if request.kind == "warm":
            return actuator.warm(request, cancelled=self._stopping.is_set)
        if request.kind == "drain":
            return actuator.drain(request)
        if request.kind == "unload":
            return actuator.unload(request)
        return actuator.evict(request)

    def _mark_running(self, command: dict[str, Any]) -> None:
        receipt = self.store.receipt(str(command["action_id"]))
        if receipt is not None:
            self.store.put_receipt(replace(receipt, status="running", message="running"))

    def _finish(
        self,
        command: dict[str, Any],
        status: str,
        reason: str,
        message: str,
        duration: float | None,
        fetched: bool = False,
    ) -> None:
        receipt = self.store.receipt(str(command["action_id"]))
        if receipt is None:
            return
        self.store.put_receipt(
            replace(
                receipt,
                status=status,
                reason=reason,
                message=message,
                duration_seconds=None if duration is None else round(duration, 3),
                artifact_fetched=fetched and command["kind"] == "load",
                finished_at=self.clock(),
                acked=False,
            )
        )
        self.changed.set()
        log.info(
            "action %s %s %s: %s",
            command["action_id"],
            command["kind"],
            status,
            message,
            extra=command_fields(command, status),
        )
