"""Small, named checks a scenario makes about a plan ("placed", "preempts", ...)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gridctl.domain import Plan

Check = Callable[[Plan], None]


@dataclass(frozen=True)
class Expect:
    """One readable expectation; ``check`` raises AssertionError with a clear message."""

    text: str
    check: Check

    def __call__(self, plan: Plan) -> None:
        self.check(plan)


def _hosts(plan: Plan, model: str) -> list[str]:
    return sorted(a.host_id for a in plan.assignments if a.model_id == model)


def placed(model: str, *hosts: str) -> Expect:
    """``model`` is assigned exactly on ``hosts``."""

    def check(plan: Plan) -> None:
        assert _hosts(plan, model) == sorted(hosts), f"{model} on {_hosts(plan, model)}"

    return Expect(f"{model} on {hosts}", check)


def placed_count(model: str, count: int) -> Expect:
    def check(plan: Plan) -> None:
        assert len(_hosts(plan, model)) == count, f"{model} on {_hosts(plan, model)}"

    return Expect(f"{count} x {model}", check)


def not_on(model: str, host: str) -> Expect:
    def check(plan: Plan) -> None:
        assert host not in _hosts(plan, model), f"{model} unexpectedly on {host}"

    return Expect(f"{model} not on {host}", check)


def existing(model: str, host: str) -> Expect:
    def check(plan: Plan) -> None:
        found = [a for a in plan.assignments if a.model_id == model and a.host_id == host]
        assert found and found[0].existing, f"{model} on {host} not kept as existing: {found}"

    return Expect(f"{model} kept on {host}", check)


def runtime(model: str, host: str, name: str) -> Expect:
    def check(plan: Plan) -> None:
        found = [a for a in plan.assignments if a.model_id == model and a.host_id == host]
        assert found and found[0].runtime == name, f"{model} on {host}: {found}"

    return Expect(f"{model} runs {name} on {host}", check)


def unsatisfied(model: str, code: str, missing: int | None = None) -> Expect:
    def check(plan: Plan) -> None:
        rows = [u for u in plan.unsatisfied if u.model_id == model and u.code.value == code]
        assert rows, f"{model} not {code}: {plan.unsatisfied}"
        if missing is not None:
            assert rows[0].missing_replicas == missing, rows

    return Expect(f"{model} unsatisfied {code}", check)


def satisfied(model: str) -> Expect:
    def check(plan: Plan) -> None:
        rows = [u for u in plan.unsatisfied if u.model_id == model]
        assert not rows, rows

    return Expect(f"{model} fully satisfied", check)


def preempts(host: str, model: str, beneficiary: str) -> Expect:
    def check(plan: Plan) -> None:
        found = [(p.host_id, p.model_id, p.beneficiary) for p in plan.preemptions]
        assert (host, model, beneficiary) in found, found

    return Expect(f"preempt {model} on {host} for {beneficiary}", check)


def preemption_count(count: int) -> Expect:
    def check(plan: Plan) -> None:
        assert len(plan.preemptions) == count, plan.preemptions

    return Expect(f"{count} preemptions", check)


def target(model: str, replicas: int) -> Expect:
    def check(plan: Plan) -> None:
        assert dict(plan.targets)[model] == replicas, plan.targets

    return Expect(f"target {model} = {replicas}", check)


def rejected(model: str, host: str, code: str) -> Expect:
    """The explanation of (model, host) names rejection ``code``."""

    def check(plan: Plan) -> None:
        found = [e for e in plan.explanations if e.model_id == model]
        assert found, f"no explanation for {model}"
        rows = [c for c in found[0].candidates if c.host_id == host]
        assert rows and rows[0].rejection == code, rows

    return Expect(f"{model} rejected on {host}: {code}", check)


def scored_with(model: str, host: str, component: str) -> Expect:
    def check(plan: Plan) -> None:
        found = next(e for e in plan.explanations if e.model_id == model)
        rows = [c for c in found.candidates if c.host_id == host]
        names = [s.name for s in rows[0].components] if rows else []
        assert component in names, rows

    return Expect(f"{model} on {host} scored with {component}", check)
