"""The removal guard, as a property over random external fleets: removing external engines
without force never leaves a model that had a routable replica with none, and refuses
only the removal that would (a replica elsewhere, or none routable, lets it go)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.controller.externals import removal_refusal
from gridctl.controller.registry import Registry

NOW = 1_000_000.0
MODELS = ("a", "b", "c")
NAMES = tuple(f"e{i}" for i in range(6))

engines = st.dictionaries(
    st.sampled_from(NAMES),
    st.tuples(st.sampled_from(MODELS), st.booleans()),  # (model, probed ready)
    min_size=1,
)


def fleet(members: dict[str, tuple[str, bool]]) -> Registry:
    registry = Registry()
    for name, (model, ready) in sorted(members.items()):
        endpoint = f"https://{name}.vendor.test"
        registry.register_external(name, endpoint, model, "vllm", NOW)
        if ready:
            registry.corroborate(name, model, endpoint, NOW)
    return registry


def served(registry: Registry) -> set[str]:
    return {m for m in MODELS if registry.routable(m, NOW)}


@settings(max_examples=200, deadline=None)
@given(engines, st.lists(st.sampled_from(NAMES), max_size=12))
def test_removal_without_force_never_cuts_a_model_off(
    members: dict[str, tuple[str, bool]], removals: list[str]
) -> None:
    registry = fleet(members)
    for name in removals:
        record = registry.host(name)
        if record is None:
            continue
        before = served(registry)
        models = list(record.routes)
        sole = [m for m in models if [r.host_id for r in registry.routable(m, NOW)] == [name]]
        refusal = removal_refusal(registry, name, models, NOW)
        assert (refusal is None) == (not sole)  # refused exactly when it is a sole replica
        if refusal is None:
            registry.forget(name)
        assert served(registry) == before
