"""Property: the server-side dry run is exactly the controller's next tick.

For random fleets brought to a random point of convergence, and a random edit of
the desired state (add, remove, change bounds, change priority, change mode),
``POST /allocator/dry-run`` with the edited files returns the same actions (ids,
kinds, hosts, models, executable, held reasons), the same enqueued ids and the
same cancellations as the tick the controller runs right after adopting that
desired state from the same inputs. The controller is the real one, in-process.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from gridctl.controller.applying import desired_from_files
from gridctl.controller.desired import ApiDesired
from gridctl.controller.serving import ControllerService, ServiceOptions
from gridctl.reconcile import action_to_json
from gridctl.tick.previewing import action_signature
from tests.controller.simnodes import GEMMA_SHA, Clock, SimNode, engine_handler

MODELS = ("m0", "m1", "m2", "m3")
OTHER_SHA = "b" * 64


@dataclass(frozen=True)
class Spec:
    memory_mb: int
    min_replicas: int
    max_replicas: int
    priority: int
    own_artifact: bool


specs = st.builds(
    Spec,
    memory_mb=st.sampled_from([640, 1200]),
    min_replicas=st.sampled_from([1, 2, 0]),
    max_replicas=st.integers(1, 3),
    priority=st.sampled_from([10, 50, 90]),
    own_artifact=st.booleans(),
)
fleets = st.lists(
    st.tuples(st.sampled_from([1024, 2048, 4096]), st.sets(st.sampled_from(MODELS))),
    min_size=1,
    max_size=3,
)
edits = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(MODELS), specs),
    st.tuples(st.just("remove"), st.sampled_from(MODELS), st.none()),
    st.tuples(
        st.just("bounds"), st.sampled_from(MODELS), st.tuples(st.integers(0, 2), st.integers(1, 3))
    ),
    st.tuples(st.just("priority"), st.sampled_from(MODELS), st.sampled_from([10, 50, 90])),
    st.tuples(st.just("mode"), st.none(), st.sampled_from(["recommend", "automatic"])),
)


def profile_text(name: str, spec: Spec) -> str:
    sha = OTHER_SHA if spec.own_artifact else GEMMA_SHA
    return (
        f"apiVersion: gridctl/v1\nkind: ModelProfile\nmetadata: {{name: {name}}}\nspec:\n"
        f"  memory_mb: {spec.memory_mb}\n  artifact: {{sha256: {sha}}}\n"
        f"  min_replicas: {spec.min_replicas}\n"
        f"  max_replicas: {max(spec.min_replicas, spec.max_replicas)}\n"
        f"  priority: {spec.priority}\n  min_residency_seconds: 0\n"
        "  scale_down_cooldown_seconds: 0\n"
    )


def files_of(profiles: dict[str, Spec], mode: str) -> dict[str, str]:
    files = {f"{name}.yaml": profile_text(name, spec) for name, spec in profiles.items()}
    files["policy.yaml"] = (
        "apiVersion: gridctl/v1\nkind: ControllerPolicy\nmetadata: {name: p}\n"
        f"spec:\n  mode: {mode}\n  mutation_cooldown_seconds: 0\n"
    )
    return files


def edited(
    profiles: dict[str, Spec], mode: str, edit: tuple[str, Any, Any]
) -> tuple[dict[str, Spec], str]:
    kind, name, value = edit
    out = dict(profiles)
    if kind == "add":
        out[name] = value
    elif kind == "remove":
        out.pop(name, None)
    elif kind == "bounds" and name in out:
        low, high = value
        out[name] = Spec(out[name].memory_mb, low, high, out[name].priority, out[name].own_artifact)
    elif kind == "priority" and name in out:
        old = out[name]
        out[name] = Spec(old.memory_mb, old.min_replicas, old.max_replicas, value, old.own_artifact)
    elif kind == "mode":
        mode = value
    return out, mode


def adopt(service: ControllerService, files: dict[str, str], revision: str) -> None:
    source = service.controller.desired
    assert isinstance(source, ApiDesired)
    state, documents = desired_from_files(files, revision, True)
    source.adopt(state, documents)


def beat(service: ControllerService, node: SimNode) -> None:
    """One heartbeat straight into the controller (no HTTP wait for a tick)."""
    payload = {
        "node_id": node.host_id,
        "resources": node.resources(),
        "allocator": node.envelope(),
        "request_commands": False,
        "acknowledgements": node.acks,
    }
    node.acks = []
    service.controller.heartbeat(node.host_id, payload)


def signature(rows: list[dict[str, Any]]) -> list[tuple[str, str, str, str, bool, str]]:
    return action_signature(rows)


async def scenario(
    root: Path,
    fleet: list[tuple[int, set[str]]],
    initial: dict[str, Spec],
    rounds: int,
    edit: tuple[str, Any, Any],
) -> None:
    clock = Clock()
    service = ControllerService(
        ServiceOptions(
            state_dir=root / "state",
            clock=clock,
            upstream_transport=httpx.MockTransport(engine_handler),
        )
    )
    app = service.build_app()
    ctl = service.controller
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://ctl"
        ) as client:
            nodes = []
            for i, (capacity, cached) in enumerate(fleet):
                node = SimNode.for_controller(
                    root / "state",
                    f"h{i}",
                    client,
                    clock,
                    capacity_mb=capacity,
                    failure_domain=f"zone-{i}",
                    cached={m: GEMMA_SHA for m in sorted(cached)},
                )
                assert (await node.register()).status_code == 200
                nodes.append(node)
            adopt(service, files_of(initial, "automatic"), "r0")
            for _ in range(rounds):  # a random point of convergence, pending work included
                ctl.tick()
                for node in nodes:
                    for command in ctl.commands_for(node.host_id):
                        node.execute(command)
                    beat(service, node)
                await service.probe_once(service.upstream)
                clock.now += 1.0
            ctl.tick()

            profiles, mode = edited(initial, "automatic", edit)
            files = files_of(profiles, mode)
            body = {"desired": {"revision": "r1", "dirty": True, "files": files}}
            headers = {"X-Grid-Allocator-Token": service.operator_token}
            answer = await client.post("/allocator/dry-run", json=body, headers=headers)
            assert answer.status_code == 200, answer.text
            dry = answer.json()
            event(f"{len(dry['actions'])} action(s), {len(dry['destroys'])} destroy(s)")

            adopt(service, files, "r1")
            record = ctl.tick()
            assert record.ok, record.error
            result = ctl.view.result
            assert result is not None
            assert signature(dry["actions"]) == signature(
                [action_to_json(a) for a in result.actions]
            )
            assert signature(dry["deferred"]) == signature(
                [action_to_json(a) for a in result.deferred]
            )
            assert dry["enqueue"] == [p.action_id for p in result.enqueue]
            assert dry["cancellations"] == [
                {"action_id": c.action_id, "reason": c.reason.value, "delivered": c.delivered}
                for c in result.cancellations
            ]
            assert dry["mode"] == ctl.effective_mode()[0].value
            assert ctl.view.plan is not None
            assert dry["plan"]["input_digest"] == ctl.view.plan.input_digest
    finally:
        service.stop_ticking()
        service.metrics.close()
        await service.upstream.aclose()


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    fleet=fleets,
    initial=st.dictionaries(st.sampled_from(MODELS), specs, min_size=1, max_size=3),
    rounds=st.sampled_from([3, 0, 1, 2, 5]),
    edit=edits,
)
@example(  # a removal of a ready model: the dry run's destroy is the tick's drain
    fleet=[(4096, {"m0"})],
    initial={"m0": Spec(640, 1, 2, 50, False)},
    rounds=2,
    edit=("remove", "m0", None),
)
@example(  # a higher priority on a full host: a staged preemption
    fleet=[(1024, {"m0", "m1"})],
    initial={"m0": Spec(640, 1, 1, 10, False), "m1": Spec(640, 0, 1, 50, False)},
    rounds=3,
    edit=("bounds", "m1", (1, 1)),
)
def test_dry_run_actions_equal_the_next_ticks(
    fleet: list[tuple[int, set[str]]],
    initial: dict[str, Spec],
    rounds: int,
    edit: tuple[str, Any, Any],
) -> None:
    with tempfile.TemporaryDirectory(prefix="gridctl-dryrun-") as tmp:
        asyncio.run(scenario(Path(tmp), fleet, initial, rounds, edit))
