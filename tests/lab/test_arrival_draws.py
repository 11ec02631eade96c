"""The arrival trace's inlined draws give the trace the Stream's own methods give."""

from __future__ import annotations

import math
from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.lab.arrivals import (
    ENDPOINTS,
    INPUT_UNITS,
    MINUTE,
    OUTPUT_UNITS,
    TEXTS,
    Arrival,
    generate,
)
from gridctl.lab.arrivals import _base_weights as base_weights
from gridctl.lab.population import STAGE_MINUTES, User, population
from gridctl.lab.rng import Stream
from gridctl.lab.workday import curves

START = 1_800_000_000.0


def reference(
    users: tuple[User, ...],
    minutes: int,
    day: Mapping[str, tuple[float, ...]],
    seed: int,
    model_name: str,
) -> tuple[tuple[Arrival, ...], ...]:
    """The trace drawn one ``Stream`` call at a time, in the documented order."""
    stream = Stream(seed, "arrivals")
    names = sorted(day)
    out: list[tuple[Arrival, ...]] = []
    for minute in range(minutes):
        rows: list[Arrival] = []
        factors = [day[w][minute] for w in names]
        for user in users:
            base, follow = base_weights(user, names)
            stages = user.project.stages
            position = minute + user.project.offset
            stage = stages[(position // STAGE_MINUTES) % len(stages)]
            weights = list(base)
            weights[names.index(stage)] += follow
            weights = [w * f for w, f in zip(weights, factors, strict=True)]
            total = sum(weights)
            lam = user.persona.rate_per_minute * total
            if lam <= 0:
                continue
            count = stream.knuth_poisson(math.exp(-lam)) if lam <= 30 else stream.poisson(lam)
            cycle = position // (STAGE_MINUTES * len(stages))
            for _ in range(count):
                chosen = stream.weighted(weights, total)
                endpoint, modality = ENDPOINTS.get(names[chosen], ("chat", "text"))
                texts = TEXTS.get(names[chosen], ("",))
                text = texts[stream.below(len(texts))] if endpoint == "chat" else ""
                t = round(START + MINUTE * (minute + stream.uniform()), 6)
                rows.append(
                    Arrival(
                        minute=minute,
                        t=t,
                        user_id=user.user_id,
                        intent=names[chosen],
                        endpoint=endpoint,
                        modality=modality,
                        text=text,
                        model=model_name if user.persona.names_model else None,
                        session=f"{user.project.project_id}/{user.user_id}/{cycle}",
                        input_units=INPUT_UNITS[stream.below(400)],
                        output_units=OUTPUT_UNITS[stream.below(300)],
                    )
                )
        rows.sort(key=lambda a: (a.t, a.user_id))
        out.append(tuple(rows))
    return tuple(out)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    users=st.integers(1, 40),
    minutes=st.integers(2, 30),
    scale=st.sampled_from([0.0, 0.3, 1.0, 40.0, 200.0]),  # 40 and 200: Poisson means over 30
)
def test_inlined_draws_give_the_reference_trace(
    seed: int, users: int, minutes: int, scale: float
) -> None:
    people = population(users, seed)
    day = {w: tuple(v * scale for v in values) for w, values in curves(minutes, {}).items()}
    expected = reference(people, minutes, day, seed, "baseline")
    assert generate(people, minutes, day, seed, START, "baseline") == expected
