"""The lab's model catalog: deterministic profiles with immutable artifact identities.

``lab_models(n)`` takes the first ``n`` of a fixed, varied list of 32 (the
specification's maximum): a general baseline that operations traffic names
directly, coding, research, writing, design, image, video and embedding
specialists in several sizes, on llama.cpp, vLLM and ComfyUI, small enough for
a laptop or big enough to need the GPU server.
Artifacts carry a digest derived from the model name and a ``lab://`` source,
so cache hits and prefetches are exact-identity events.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from gridctl.domain import Artifact, DataTier, ModelProfile


@dataclass(frozen=True)
class _Spec:
    name: str
    memory_mb: int
    runtimes: tuple[str, ...]
    scores: tuple[tuple[str, float], ...]
    service_seconds: float
    concurrency: int
    size_mb: int
    backends: tuple[str, ...] = ()
    min_replicas: int = 0
    max_replicas: int = 2
    priority: int = 50
    slo_ms: int = 8000
    min_gpu_memory_mb: int = 0


_SPECS: tuple[_Spec, ...] = (
    _Spec(
        "general-8b",
        6144,
        ("llama.cpp", "vllm", "ollama"),
        (
            ("general", 0.8),
            ("marketing", 0.5),
            ("sales", 0.5),
            ("research", 0.4),
            ("coding", 0.3),
            ("design", 0.3),
        ),
        2.0,
        4,
        4800,
        min_replicas=1,
        max_replicas=3,
        priority=60,
    ),
    _Spec(
        "coder-14b",
        12288,
        ("llama.cpp", "vllm"),
        (("coding", 0.95), ("general", 0.3)),
        3.0,
        4,
        9000,
        max_replicas=3,
    ),
    _Spec(
        "research-32b",
        24576,
        ("llama.cpp", "vllm"),
        (("research", 0.9), ("marketing", 0.6), ("sales", 0.6), ("general", 0.6)),
        4.0,
        4,
        20000,
    ),
    _Spec(
        "image-sdxl",
        10240,
        ("comfyui",),
        (("image", 0.9), ("design", 0.4)),
        6.0,
        2,
        7000,
        backends=("cuda",),
    ),
    _Spec(
        "embed-small", 1024, ("llama.cpp", "ollama", "vllm"), (("embedding", 0.95),), 0.2, 8, 600
    ),
    _Spec(
        "writer-8b",
        6144,
        ("llama.cpp", "ollama"),
        (("marketing", 0.9), ("sales", 0.85), ("design", 0.5), ("general", 0.5)),
        2.0,
        4,
        4800,
    ),
    _Spec(
        "video-wan",
        20480,
        ("comfyui",),
        (("video", 0.85),),
        30.0,
        1,
        16000,
        backends=("cuda",),
        min_gpu_memory_mb=20480,
    ),
    _Spec(
        "coder-7b",
        5120,
        ("llama.cpp", "ollama"),
        (("coding", 0.75), ("general", 0.4)),
        1.5,
        4,
        4200,
    ),
    _Spec(
        "design-vl-8b",
        7168,
        ("llama.cpp", "vllm"),
        (("design", 0.9), ("image", 0.3), ("marketing", 0.4)),
        3.0,
        2,
        5500,
    ),
    _Spec(
        "general-3b",
        2560,
        ("llama.cpp", "ollama"),
        (("general", 0.55), ("sales", 0.4)),
        1.0,
        4,
        2000,
    ),
    _Spec(
        "research-8b",
        6144,
        ("llama.cpp", "ollama"),
        (("research", 0.7), ("general", 0.5)),
        2.0,
        4,
        4800,
    ),
    _Spec("image-flux", 16384, ("comfyui",), (("image", 0.97),), 8.0, 1, 12000, backends=("cuda",)),
    _Spec(
        "sales-4b",
        3072,
        ("llama.cpp", "ollama"),
        (("sales", 0.8), ("marketing", 0.5)),
        1.2,
        4,
        2500,
    ),
    _Spec(
        "coder-32b",
        24576,
        ("vllm",),
        (("coding", 1.0), ("research", 0.5)),
        4.0,
        6,
        20000,
        backends=("cuda",),
    ),
    _Spec(
        "general-70b",
        45056,
        ("vllm",),
        (("general", 0.95), ("research", 0.85), ("marketing", 0.7), ("sales", 0.7)),
        5.0,
        8,
        40000,
        backends=("cuda",),
        priority=40,
    ),
    _Spec("embed-large", 2048, ("llama.cpp", "vllm"), (("embedding", 0.99),), 0.4, 8, 1300),
    # The second sixteen: other sizes and quantizations of the families above plus
    # second embedding, image and video models, so a fleet can run 32 models.
    _Spec(
        "general-1b",
        1280,
        ("llama.cpp", "ollama"),
        (("general", 0.4), ("sales", 0.3)),
        0.6,
        6,
        900,
    ),
    _Spec(
        "coder-3b",
        2560,
        ("llama.cpp", "ollama"),
        (("coding", 0.6), ("general", 0.3)),
        1.0,
        4,
        2000,
    ),
    _Spec(
        "embed-multilingual",
        1536,
        ("llama.cpp", "ollama", "vllm"),
        (("embedding", 0.97),),
        0.3,
        8,
        1100,
    ),
    _Spec(
        "image-sd15",
        4096,
        ("comfyui",),
        (("image", 0.75), ("design", 0.3)),
        3.0,
        2,
        2500,
        backends=("cuda",),
    ),
    _Spec(
        "video-ltx",
        16384,
        ("comfyui",),
        (("video", 0.7),),
        20.0,
        1,
        9000,
        backends=("cuda",),
        min_gpu_memory_mb=16384,
    ),
    _Spec(
        "general-14b",
        12288,
        ("llama.cpp", "vllm", "ollama"),
        (
            ("general", 0.85),
            ("research", 0.6),
            ("marketing", 0.55),
            ("sales", 0.55),
            ("coding", 0.4),
        ),
        2.5,
        4,
        9000,
        max_replicas=3,
    ),
    _Spec(
        "research-70b",
        45056,
        ("vllm",),
        (("research", 0.97), ("general", 0.85), ("marketing", 0.6)),
        6.0,
        8,
        40000,
        backends=("cuda",),
        priority=40,
    ),
    _Spec(
        "writer-14b",
        12288,
        ("llama.cpp", "vllm"),
        (("marketing", 0.95), ("sales", 0.9), ("design", 0.55), ("general", 0.55)),
        2.5,
        4,
        9000,
    ),
    _Spec(
        "design-vl-32b",
        24576,
        ("vllm",),
        (("design", 0.97), ("image", 0.45), ("marketing", 0.5)),
        4.0,
        4,
        20000,
        backends=("cuda",),
    ),
    _Spec(
        "sales-8b",
        6144,
        ("llama.cpp", "ollama"),
        (("sales", 0.9), ("marketing", 0.6), ("general", 0.4)),
        2.0,
        4,
        4800,
    ),
    _Spec(
        "coder-22b",
        18432,
        ("llama.cpp", "vllm"),
        (("coding", 0.97), ("research", 0.4)),
        3.5,
        4,
        14000,
    ),
    _Spec(
        "research-14b",
        12288,
        ("llama.cpp", "vllm"),
        (("research", 0.8), ("general", 0.55), ("marketing", 0.45)),
        3.0,
        4,
        9000,
    ),
    _Spec(
        "marketing-3b",
        2560,
        ("llama.cpp", "ollama"),
        (("marketing", 0.7), ("sales", 0.55)),
        1.0,
        4,
        2000,
    ),
    _Spec(
        "general-8b-q8",
        9216,
        ("llama.cpp", "vllm", "ollama"),
        (
            ("general", 0.82),
            ("marketing", 0.52),
            ("sales", 0.52),
            ("research", 0.42),
            ("coding", 0.32),
            ("design", 0.32),
        ),
        2.2,
        4,
        8500,
    ),
    _Spec(
        "image-flux-schnell",
        12288,
        ("comfyui",),
        (("image", 0.9), ("design", 0.35)),
        3.0,
        2,
        12000,
        backends=("cuda",),
    ),
    _Spec("embed-code", 1024, ("llama.cpp", "ollama"), (("embedding", 0.9),), 0.2, 8, 700),
)

MAX_MODELS = len(_SPECS)


def artifact_digest(name: str) -> str:
    """The deterministic immutable identity of a lab model's weights."""
    return hashlib.sha256(f"gridctl-lab-artifact\x00{name}".encode()).hexdigest()


def _profile(spec: _Spec) -> ModelProfile:
    return ModelProfile(
        name=spec.name,
        memory_mb=spec.memory_mb,
        artifact=Artifact(
            sha256=artifact_digest(spec.name), source=f"lab://{spec.name}", size_mb=spec.size_mb
        ),
        runtimes=tuple(sorted(spec.runtimes)),
        backends=spec.backends,
        data_tier=DataTier.INTERNAL,
        min_replicas=spec.min_replicas,
        max_replicas=spec.max_replicas,
        priority=spec.priority,
        workload_scores=dict(spec.scores),
        expected_service_seconds=spec.service_seconds,
        latency_slo_ms=spec.slo_ms,
        load_seconds=30.0,
        warm_seconds=20.0,
        min_residency_seconds=300.0,
        scale_down_cooldown_seconds=600.0,
        replica_concurrency=spec.concurrency,
        min_gpu_memory_mb=spec.min_gpu_memory_mb,
    )


def lab_models(count: int) -> tuple[ModelProfile, ...]:
    """The first ``count`` lab models, sorted by name (1 <= count <= MAX_MODELS).

    The selection is a prefix of the declared list and only the result is
    sorted, so specs appended at the end never change which models a smaller
    ``count`` picks: every run with ``--models`` <= 16 stays what it was
    before the catalog grew to 32.
    """
    if not 1 <= count <= MAX_MODELS:
        raise ValueError(f"models must be between 1 and {MAX_MODELS}, got {count}")
    return tuple(sorted((_profile(s) for s in _SPECS[:count]), key=lambda p: p.name))


BASELINE_MODEL = _SPECS[0].name
