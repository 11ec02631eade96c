"""The main job on real processes: `gridctl up`, real llama-server children, the openai client."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from openai import OpenAI

from gridctl.config.schemas import validator
from tests.e2e.harness import GEMMA, ROOT, Fleet, make_fleet, profile_yaml, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    fleet = make_fleet(tmp_path)
    fleet.repo.write("gemma.yaml", profile_yaml(GEMMA, min_replicas=1))
    fleet.repo.commit("gemma baseline")
    yield fleet
    fleet.stop()


def one_engine_child(fleet: Fleet) -> list[psutil.Process]:
    """Wait until the fleet runs exactly one engine child (a transient extra copy drains)."""

    def exactly_one() -> list[psutil.Process] | None:
        children = fleet.engine_children()
        return children if len(children) == 1 else None

    return wait_for("exactly one engine child", exactly_one, deadline=120)


def client_for(fleet: Fleet) -> OpenAI:
    return OpenAI(base_url=fleet.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def chat(client: OpenAI, model: str = GEMMA) -> str:
    reply = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Say hello."}], max_tokens=8
    )
    return reply.choices[0].message.content or ""


def started(fleet: Fleet, model: str = GEMMA, replicas: int = 1) -> None:
    try:
        wait_for(
            f"{replicas} routable {model}",
            lambda: len(fleet.routable(model)) >= replicas,
            deadline=180,
        )
    except AssertionError:
        print(fleet.log())
        raise


def test_readme_command_serves_gemma(fleet: Fleet) -> None:
    fleet.start(command=[str(ROOT / "scripts" / "up")])
    client = client_for(fleet)
    models = wait_for(
        "gemma in /v1/models",
        lambda: [m.id for m in client.models.list().data if m.id == GEMMA],
        deadline=300,
    )
    assert models == [GEMMA]
    answer = chat(client)
    first_answer = time.monotonic() - fleet.started_at
    assert answer.strip()
    stream = client.chat.completions.create(
        model=GEMMA,
        messages=[{"role": "user", "content": "Count to three."}],
        max_tokens=8,
        stream=True,
    )
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert streamed.strip()
    print(f"\nMEASURED up -> first answer: {first_answer:.1f}s (includes bootstrap)")
    status = fleet.status()
    assert list(validator("wire/status.schema.json").iter_errors(status)) == []


def test_scale_up_without_failures_then_retire(fleet: Fleet) -> None:
    fleet.start()
    started(fleet)
    client = client_for(fleet)
    failures: list[str] = []
    served = [0]
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            try:
                chat(client)
                served[0] += 1
            except Exception as exc:  # any failed request fails the test
                failures.append(repr(exc))

    worker = threading.Thread(target=traffic, daemon=True)
    worker.start()
    fleet.repo.write("gemma.yaml", profile_yaml(GEMMA, min_replicas=2))
    committed = time.monotonic()
    revision = fleet.repo.commit("two replicas")
    wait_for("desired revision in force", lambda: fleet.status()["desired"]["revision"] == revision)
    hosts = wait_for(
        "two routable replicas",
        lambda: (h := fleet.routable(GEMMA)) and len(h) == 2 and h,
        deadline=180,
    )
    second_ready = time.monotonic() - committed
    wait_for("traffic on both replicas", lambda: served[0] >= 3, deadline=60)
    stop.set()
    worker.join(timeout=60)
    assert failures == []
    assert hosts == ["local-1", "local-2"]
    print(
        f"\nMEASURED min_replicas commit -> second replica READY: {second_ready:.1f}s; "
        f"{served[0]} requests served during scale-up, 0 failed"
    )

    fleet.repo.remove("gemma.yaml")
    fleet.repo.commit("retire gemma")
    wait_for(
        "every gemma copy drained and unloaded", lambda: not fleet.live_copies(GEMMA), deadline=180
    )
    status = fleet.status()
    assert [t["model_id"] for t in status["tombstones"]] == [GEMMA]
    events = [e["event"] for e in status["history"] if e.get("model_id") == GEMMA]
    assert "drain_succeeded" in events and "unload_succeeded" in events
    wait_for("engine children gone", lambda: not fleet.engine_children(), deadline=60)


def test_demand_driven_warm_and_cooldown(fleet: Fleet) -> None:
    fleet.repo.write("gemma-b.yaml", profile_yaml("gemma-b", min_replicas=0, cooldown=3))
    fleet.repo.commit("demand-only profile")
    fleet.start()
    started(fleet)
    client = client_for(fleet)
    rejected = 0
    with pytest.raises(Exception) as first:
        chat(client, "gemma-b")
    assert getattr(first.value, "status_code", None) == 503
    rejected += 1

    def answered() -> str | None:
        nonlocal rejected
        try:
            return chat(client, "gemma-b")
        except Exception as exc:
            assert getattr(exc, "status_code", None) == 503, exc
            rejected += 1
            return None

    answer = wait_for("gemma-b warmed by demand", answered, deadline=180, interval=1.0)
    assert answer.strip()
    assert rejected >= 2  # below the evidence threshold nothing warmed
    wait_for(
        "gemma-b drained and unloaded after its cooldown",
        lambda: not fleet.live_copies("gemma-b"),
        deadline=180,
    )
    assert fleet.routable(GEMMA)  # the baseline stayed


def test_sigkill_of_child_is_rewarmed(fleet: Fleet) -> None:
    fleet.start()
    started(fleet)
    client = client_for(fleet)
    (child,) = one_engine_child(fleet)
    child.send_signal(signal.SIGKILL)
    wait_for(
        "the failure reported",
        lambda: (
            any(
                e["event"] in ("warm_failed", "unload_succeeded") or "fail" in e["event"]
                for e in fleet.status()["history"]
            )
            or any(r["state"] == "failed" for r in fleet.residencies(GEMMA))
        ),
        deadline=60,
    )

    def serving_again() -> str | None:
        try:
            return chat(client)
        except Exception:
            return None

    assert wait_for("requests succeed again", serving_again, deadline=180)
    new_children = fleet.engine_children()
    assert new_children and all(c.pid != child.pid for c in new_children)


def test_node_restart_adopts_the_live_child(fleet: Fleet) -> None:
    fleet.start(machines=1)
    started(fleet)
    (child,) = one_engine_child(fleet)
    node = next(
        p
        for p in psutil.process_iter(["cmdline"])
        if "node" in (p.info["cmdline"] or [])
        and "start" in (p.info["cmdline"] or [])
        and str(fleet.state_dir) in " ".join(p.info["cmdline"] or [])
    )
    argv, cwd = node.cmdline(), node.cwd()
    node.send_signal(signal.SIGKILL)
    # the node is `gridctl up`'s child, not ours: wait until it is dead (reaped or zombie)
    wait_for(
        "the node daemon dead",
        lambda: not node.is_running() or node.status() == psutil.STATUS_ZOMBIE,
        deadline=30,
    )
    assert child.is_running()
    with (fleet.state_dir / "restart.log").open("wb") as restart_log:
        restarted = psutil.Popen(argv, cwd=cwd, stdout=restart_log, stderr=-2)
    try:
        wait_for(
            "the restarted node reports the adopted child ready",
            lambda: (
                fleet.routable(GEMMA) == ["local-1"]
                and any(e["event"] == "host_registered" for e in fleet.status()["history"][-50:])
            ),
            deadline=120,
        )
        assert [c.pid for c in fleet.engine_children()] == [child.pid]
        fleet.repo.remove("gemma.yaml")
        fleet.repo.commit("retire")
        wait_for(
            "adopted child drained and unloaded",
            lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE,
            deadline=120,
        )
    finally:
        restarted.send_signal(signal.SIGTERM)
        restarted.wait(timeout=60)


def test_security_boundaries_on_real_processes(fleet: Fleet) -> None:
    fleet.start()
    started(fleet)
    (child,) = one_engine_child(fleet)
    cmd = child.cmdline()
    port = int(cmd[cmd.index("--port") + 1])
    direct = httpx.post(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        timeout=30,
        json={"model": GEMMA, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert direct.status_code == 401
    key_file = Path(cmd[cmd.index("--api-key-file") + 1])
    key = key_file.read_text().strip()
    assert len(key) >= 16
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    assert key not in Path(f"/proc/{child.pid}/cmdline").read_bytes().decode(errors="replace")
    assert key not in Path(f"/proc/{child.pid}/environ").read_bytes().decode(errors="replace")
    assert key not in json.dumps(fleet.status())
    assert key not in httpx.get(fleet.url + "/v1/models").text
    assert key not in fleet.log()

    assert httpx.put(fleet.url + "/allocator/mode", json={"mode": "observe"}).status_code == 401
    token_a = (fleet.state_dir / "local-1" / "node.token").read_text().strip()
    stolen = httpx.post(
        fleet.url + "/nodes/local-2/heartbeat",
        json={"node_id": "local-2"},
        headers={"X-Grid-Allocator-Node-Token": token_a},
    )
    assert stolen.status_code == 403
    before = fleet.status()["hosts"]
    bad = httpx.post(
        fleet.url + "/nodes/local-1/heartbeat",
        json={"node_id": "local-1", "allocator": {"schema_version": 1}},
        headers={"X-Grid-Allocator-Node-Token": token_a},
    )
    assert bad.status_code == 400 and "pointer" in bad.json()["error"]
    after = fleet.status()["hosts"]
    assert [h["state"] for h in after] == [h["state"] for h in before]


def test_observe_and_recommend_issue_nothing_then_automatic_converges(tmp_path: Path) -> None:
    fleet = make_fleet(tmp_path, mode="observe")
    fleet.repo.write("gemma.yaml", profile_yaml(GEMMA, min_replicas=1))
    fleet.repo.commit("baseline in observe mode")
    try:
        fleet.start()
        wait_for(
            "a tick in observe mode",
            lambda: (
                (s := fleet.status())["last_tick"]
                and s["models"]
                and s["models"][0]["health"] == "Suspended"
            ),
            deadline=60,
        )
        assert fleet.status()["pending_commands"] == []
        fleet.admin("PUT", "/allocator/mode", json={"mode": "recommend"})
        proposed = wait_for(
            "proposed actions",
            lambda: [a for a in (fleet.status()["reconciliation"] or {}).get("actions", [])],
            deadline=60,
        )
        assert all(not a["executable"] for a in proposed)
        assert not fleet.engine_children() and fleet.status()["pending_commands"] == []
        response = fleet.admin("PUT", "/allocator/mode", json={"mode": "automatic"})
        assert response.json()["effective"] == "automatic"
        started(fleet)
        status = fleet.status()
        assert status["mode"]["override"]["mode"] == "automatic"
        assert status["mode"]["desired"] == "observe"
    finally:
        fleet.stop()
        os.environ.pop("GRIDCTL_TOKEN_FILE", None)
