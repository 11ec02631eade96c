"""The live controller schedules mutations on the warm times it learned from acknowledgements.

Two equally important models are cached on one host and the controller may
run one mutation at a time. On priors the model id breaks the tie; after four
acknowledged warms of ``m`` took five minutes each (authoritative learned
timing in the store), the next tick starts ``n`` first and holds ``m`` behind
the governor.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import httpx
import pytest

from gridctl.controller.serving import ControllerService
from gridctl.domain import ActionKind, Receipt, ReceiptStatus
from gridctl.reconcile import BlockedCode, ControllerMemory
from tests.controller.simnodes import GEMMA_SHA, SimNode, sim_service
from tests.controller.storefixtures import queued

POLICY = (
    "apiVersion: gridctl/v1\nkind: ControllerPolicy\nmetadata: {name: p}\n"
    "spec:\n  mode: automatic\n  max_concurrent_mutations_per_host: 1\n"
)


def profile(name: str) -> str:
    return textwrap.dedent(f"""\
        apiVersion: gridctl/v1
        kind: ModelProfile
        metadata: {{name: {name}}}
        spec:
          memory_mb: 640
          artifact: {{sha256: '{GEMMA_SHA}'}}
          warm_seconds: 10
          min_replicas: 1
          max_replicas: 1
        """)


def learn_warm(svc: ControllerService, host_id: str, model: str, seconds: float, n: int) -> None:
    """``n`` acknowledged warms of ``model`` on ``host_id`` that took ``seconds`` each."""
    for attempt in range(n):
        pending = queued(ActionKind.WARM, host_id, model, sha=GEMMA_SHA, attempt=attempt)
        svc.controller.store.apply_tick([pending], [], ControllerMemory())
        svc.controller.store.record_acknowledgement(
            Receipt(pending.action.action_id, ReceiptStatus.SUCCEEDED, duration_seconds=seconds),
            host_id=None,
        )


def next_tick(svc: ControllerService) -> dict[tuple[str, str], str | None]:
    """(kind, model) -> None when the next tick would issue it, else why it waits."""
    _, outcome = svc.controller.dry_run()
    return {
        (a.kind.value, a.model_id): None if a.executable else a.blocked
        for a in outcome.result.actions
    }


@pytest.mark.anyio
async def test_a_learned_slow_warm_changes_which_mutation_runs_first(tmp_path: Path) -> None:
    files = {"m.yaml": profile("m"), "n.yaml": profile("n"), "policy.yaml": POLICY}
    svc, clock = sim_service(tmp_path, files)
    app = svc.build_app()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        node = SimNode.for_controller(
            svc.options.state_dir, "h1", client, clock, cached={"m": GEMMA_SHA, "n": GEMMA_SHA}
        )
        assert (await node.register()).status_code == 200
        await node.heartbeat(request_commands=False)

        assert next_tick(svc) == {
            ("warm", "m"): None,
            ("warm", "n"): BlockedCode.HOST_GOVERNOR,
        }
        learn_warm(svc, "h1", "m", 300.0, 4)
        clock.now += 1.0  # a newer heartbeat: m is cached again, so those warms are done
        await node.heartbeat(request_commands=False)
        inputs, _ = svc.controller.dry_run()
        assert inputs.startup[("h1", "m")].warm_seconds == 300.0
        assert next_tick(svc) == {
            ("warm", "m"): BlockedCode.HOST_GOVERNOR,
            ("warm", "n"): None,
        }
