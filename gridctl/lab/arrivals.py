"""The arrival trace: every request of the scenario, generated once from the seed.

Arrivals depend only on the seed, the population, the duration and the
workload curves — never on what a strategy does — and each carries the text
the production classifier reads, the endpoint, an optional named model, and
its session's raw affinity key. ``trace_digest`` is the identity strategies are
compared on: every run re-hashes the arrivals it actually consumed.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from operator import attrgetter

from gridctl.lab.population import STAGE_MINUTES, STAGE_SHARE, User
from gridctl.lab.rng import GOLDEN_GAMMA as GAMMA
from gridctl.lab.rng import MASK_64 as MASK
from gridctl.lab.rng import MIX_1, MIX_2, Stream
from gridctl.lab.rng import UNIT_53 as UNIT

MINUTE = 60.0

TEXTS: dict[str, tuple[str, ...]] = {
    "coding": (
        "fix the python function that fails this test",
        "refactor this typescript module and explain the bug",
        "why does this stack trace appear when I compile",
        "write a test for the parser function",
    ),
    "research": (
        "summarize this paper and compare its sources",
        "give me an analysis of the study results",
        "compare these sources and summarize the findings",
    ),
    "marketing": (
        "draft a launch campaign for the new brand",
        "write a slogan that speaks to our audience",
        "plan the campaign launch calendar",
    ),
    "sales": (
        "prepare a pricing quote for the customer",
        "follow up with the prospect about the deal",
        "summarize the customer call and the pricing",
    ),
    "design": (
        "suggest a layout and palette for the landing page",
        "review this wireframe and the typography",
        "turn this mockup into a cleaner layout",
    ),
    "general": (
        "what is on my calendar tomorrow",
        "help me write a polite reply",
        "explain this in simpler words",
    ),
}
# request sizes as shared int objects: at the maxima the trace holds millions of
# arrivals and Python caches only the ints up to 256
INPUT_UNITS = tuple(range(50, 450))
OUTPUT_UNITS = tuple(range(20, 320))
ENDPOINTS = {
    "image": ("image", "image"),
    "video": ("video", "video"),
    "embedding": ("embeddings", "text"),
}


@dataclass(frozen=True, slots=True)
class Arrival:
    minute: int
    t: float
    user_id: str
    intent: str  # the workload the persona meant (the classifier decides what is learned)
    endpoint: str
    modality: str
    text: str
    model: str | None  # a named model (operations traffic) or None for ``auto``
    session: str  # raw affinity key
    input_units: int
    output_units: int

    def line(self) -> str:
        return (
            f"{self.minute}|{self.t:.6f}|{self.user_id}|{self.intent}|{self.endpoint}|"
            f"{self.modality}|{self.text}|{self.model or ''}|{self.session}|"
            f"{self.input_units}|{self.output_units}"
        )


def _base_weights(user: User, names: list[str]) -> tuple[list[float], float]:
    """The persona's own share per workload (the part not following the project)."""
    total = sum(share for _, share in user.persona.mix)
    follow = 0.0 if user.persona.names_model else STAGE_SHARE
    base = dict.fromkeys(names, 0.0)
    for workload, share in user.persona.mix:
        base[workload] += (1.0 - follow) * share / total
    return [base[w] for w in names], follow


def generate(
    users: tuple[User, ...],
    minutes: int,
    curves: Mapping[str, tuple[float, ...]],
    seed: int,
    start: float,
    baseline_model: str,
) -> tuple[tuple[Arrival, ...], ...]:
    """Every arrival, grouped by minute (in time order within a minute).

    The draws are made in one fixed order (per minute, per user: the count, then
    each arrival's workload, text, time and sizes). At the maxima this loop runs
    14.4 million user-minutes, so what does not depend on the user is computed
    once per minute and (persona, stage) instead: the weights, their sum, the
    Poisson mean and its ``exp(-mean)``; the arithmetic is the same, so the
    trace is the same to the bit.
    """
    stream = Stream(seed, "arrivals")
    poisson = stream.poisson
    state = stream.state
    names = sorted(curves)
    index = {w: i for i, w in enumerate(names)}
    kinds = [(*ENDPOINTS.get(w, ("chat", "text")), TEXTS.get(w, ("",))) for w in names]
    last = len(names) - 1
    bases = {id(u.persona): _base_weights(u, names) for u in users}
    plans = [
        (
            u.user_id,
            id(u.persona),
            u.persona.rate_per_minute,
            baseline_model if u.persona.names_model else None,
            u.project.stages,
            len(u.project.stages),
            u.project.offset,
            f"{u.project.project_id}/{u.user_id}/",
        )
        for u in users
    ]
    cycle_minutes = STAGE_MINUTES
    by_minute: list[tuple[Arrival, ...]] = []
    for minute in range(minutes):
        rows: list[Arrival] = []
        factors = [curves[w][minute] for w in names]
        mixes: dict[tuple[int, str], tuple[list[float], float, float, float]] = {}
        for user_id, persona, rate, model, stages, length, offset, prefix in plans:
            position = minute + offset
            stage = stages[(position // cycle_minutes) % length]
            mix = mixes.get((persona, stage))
            if mix is None:
                base, follow = bases[persona]
                weights = list(base)
                weights[index[stage]] += follow
                weights = [w * f for w, f in zip(weights, factors, strict=True)]
                total = sum(weights)
                lam = rate * total
                limit = math.exp(-lam) if 0 < lam <= 30 else 0.0
                mix = mixes[(persona, stage)] = (weights, total, lam, limit)
            weights, total, lam, limit = mix
            if lam <= 0:
                continue
            if lam <= 30:  # ``knuth_poisson(limit)``, each ``uniform`` inlined
                state = z = (state + GAMMA) & MASK
                z = ((z ^ (z >> 30)) * MIX_1) & MASK
                z = ((z ^ (z >> 27)) * MIX_2) & MASK
                p = ((z ^ (z >> 31)) >> 11) * UNIT
                count = 0
                while p > limit:
                    count += 1
                    state = z = (state + GAMMA) & MASK
                    z = ((z ^ (z >> 30)) * MIX_1) & MASK
                    z = ((z ^ (z >> 27)) * MIX_2) & MASK
                    p *= ((z ^ (z >> 31)) >> 11) * UNIT
                if not count:
                    continue
            else:
                stream.state = state
                count = poisson(lam)
                state = stream.state
                if not count:
                    continue
            session = f"{prefix}{position // (cycle_minutes * length)}"
            for _ in range(count):
                # ``weighted(weights, total)``
                state = z = (state + GAMMA) & MASK
                z = ((z ^ (z >> 30)) * MIX_1) & MASK
                z = ((z ^ (z >> 27)) * MIX_2) & MASK
                x = ((z ^ (z >> 31)) >> 11) * UNIT * total
                chosen = last
                for i, w in enumerate(weights):
                    x -= w
                    if x < 0:
                        chosen = i
                        break
                endpoint, modality, texts = kinds[chosen]
                text = ""
                if endpoint == "chat":  # ``texts[below(len(texts))]``
                    state = z = (state + GAMMA) & MASK
                    z = ((z ^ (z >> 30)) * MIX_1) & MASK
                    z = ((z ^ (z >> 27)) * MIX_2) & MASK
                    text = texts[int(((z ^ (z >> 31)) >> 11) * UNIT * len(texts))]
                # the time, then ``below(400)`` and ``below(300)`` for the sizes
                state = z = (state + GAMMA) & MASK
                z = ((z ^ (z >> 30)) * MIX_1) & MASK
                z = ((z ^ (z >> 27)) * MIX_2) & MASK
                t = round(start + MINUTE * (minute + ((z ^ (z >> 31)) >> 11) * UNIT), 6)
                state = z = (state + GAMMA) & MASK
                z = ((z ^ (z >> 30)) * MIX_1) & MASK
                z = ((z ^ (z >> 27)) * MIX_2) & MASK
                size_in = INPUT_UNITS[int(((z ^ (z >> 31)) >> 11) * UNIT * 400)]
                state = z = (state + GAMMA) & MASK
                z = ((z ^ (z >> 30)) * MIX_1) & MASK
                z = ((z ^ (z >> 27)) * MIX_2) & MASK
                size_out = OUTPUT_UNITS[int(((z ^ (z >> 31)) >> 11) * UNIT * 300)]
                rows.append(
                    Arrival(
                        minute,
                        t,
                        user_id,
                        names[chosen],
                        endpoint,
                        modality,
                        text,
                        model,
                        session,
                        size_in,
                        size_out,
                    )
                )
        rows.sort(key=_ORDER)
        by_minute.append(tuple(rows))
    return tuple(by_minute)


_ORDER = attrgetter("t", "user_id")


def trace_digest(arrivals: Iterable[Arrival]) -> str:
    """SHA-256 of every arrival's line, each ending in a newline (hashed in chunks:
    the digest of a byte stream does not depend on how it is split)."""
    digest = hashlib.sha256()
    chunk: list[str] = []
    for arrival in arrivals:
        chunk.append(arrival.line())
        if len(chunk) >= 4096:
            digest.update(("\n".join(chunk) + "\n").encode())
            chunk.clear()
    if chunk:
        digest.update(("\n".join(chunk) + "\n").encode())
    return digest.hexdigest()
