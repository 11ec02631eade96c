"""The planner's structure: modules import one way, a plan keeps no books, one placer seam.

- No import cycle among ``gridctl.planner`` modules, counting imports made only for
  type checking and inside functions (a cycle hidden that way is still a cycle).
- A returned plan (explanation rows included, read or not) references no
  ``Workspace``, ledger, host class or search: the books are freed when it returns.
- The placement rounds search through a ``Placer``: one that only records what it
  is asked and delegates to the single-host placer gives the plan ``plan_placement``
  gives.
"""

from __future__ import annotations

import ast
import gc
import types
import weakref
from pathlib import Path

from hypothesis import HealthCheck, given, settings

from gridctl.domain import ControllerPolicy, FleetSnapshot, ModelProfile, Plan
from gridctl.planner import plan_bytes, plan_placement
from gridctl.planner.candidates import Candidate, Choice
from gridctl.planner.canonical import input_digest
from gridctl.planner.host_classes import HostClasses
from gridctl.planner.ledgers import HostLedger
from gridctl.planner.placers import SingleHostPlacer
from gridctl.planner.planning import assemble, report_domain_shortfalls, set_targets
from gridctl.planner.rejections import RejectionCode
from gridctl.planner.rounds import place_pins, place_rounds
from gridctl.planner.scoring import forget_roundings
from gridctl.planner.seeding import seed_incumbents
from gridctl.planner.selection import Search
from gridctl.planner.workspace import Workspace

from .strategies import planning_inputs

Inputs = tuple[list[ModelProfile], FleetSnapshot, ControllerPolicy]
PLANNER = Path(__file__).resolve().parents[2] / "gridctl" / "planner"


def _planner_imports() -> dict[str, set[str]]:
    """Each planner module's imports of other planner modules, wherever they are made."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PLANNER.glob("*.py")):
        name = "gridctl.planner" if path.stem == "__init__" else f"gridctl.planner.{path.stem}"
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module]
                if node.module == "gridctl.planner":
                    targets += [f"gridctl.planner.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            found.update(t for t in targets if t.startswith("gridctl.planner"))
        graph[name] = found - {name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph``, if any (depth first, modules in name order)."""
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if target not in graph:
                continue  # a name imported from the package, not a module
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            found = visit(module)
            if found:
                return found
    return None


def test_planner_modules_import_one_way() -> None:
    graph = _planner_imports()
    assert "gridctl.planner.workspace" in graph and graph["gridctl.planner.selection"]
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


_BOOKS = (Workspace, HostLedger, HostClasses, Search, Candidate)


def _reachable_books(root: object, limit: int = 2_000_000) -> list[str]:
    """Names of the plan's books reachable from ``root`` through ``gc.get_referents``."""
    seen: set[int] = set()
    stack = [root]
    found: list[str] = []
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, type):
            continue
        seen.add(id(item))
        assert len(seen) < limit, "the plan's object graph is unexpectedly large"
        if isinstance(item, _BOOKS):
            found.append(type(item).__name__)
        if isinstance(item, types.ModuleType):
            continue  # module state is the process's, not something the plan keeps
        if isinstance(item, types.FunctionType):
            # what a function can keep alive of its own: its closure and defaults (its
            # globals are its module's, shared by every plan and by the whole test run)
            stack.extend(item.__closure__ or ())
            stack.extend(item.__defaults__ or ())
            stack.extend((item.__kwdefaults__ or {}).values())
            continue
        stack.extend(gc.get_referents(item))
    return found


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planning_inputs(max_hosts=20))
def test_a_returned_plan_keeps_none_of_the_books(inputs: Inputs) -> None:
    profiles, snapshot, pol = inputs
    for by_class in (False, True):
        plan = plan_placement(profiles, snapshot, pol, by_class=by_class)
        assert _reachable_books(plan) == []
        for explanation in plan.explanations:
            assert len(explanation.candidates) == len(snapshot.hosts)
        assert _reachable_books(plan) == []


def test_the_book_finder_sees_through_closures_defaults_and_bound_methods() -> None:
    book = object.__new__(Candidate)  # only its type matters to the finder

    def holding() -> object:
        return book

    def defaulted(kept: object = book) -> object:
        return kept

    class Holder:
        def __init__(self) -> None:
            self.kept = book

        def method(self) -> object:
            return self.kept

    assert _reachable_books(("row", holding)) == ["Candidate"]
    assert _reachable_books({"lazy": defaulted}) == ["Candidate"]
    assert _reachable_books([Holder().method]) == ["Candidate"]
    # a module's globals are shared state, never something a plan keeps
    assert _reachable_books(types.SimpleNamespace(module=types.ModuleType("m"))) == []


def _pipeline(inputs: Inputs, placer: SingleHostPlacer) -> tuple[Plan, weakref.ref[Workspace]]:
    """``plan_placement``'s steps, with the placer given and the workspace watched."""
    profiles, snapshot, pol = inputs
    forget_roundings()
    ws = Workspace(profiles, snapshot, pol)
    set_targets(ws)
    ws.build_scarcity()
    seed_incumbents(ws)
    place_pins(ws)
    place_rounds(ws, placer)
    report_domain_shortfalls(ws)
    plan = assemble(ws, input_digest(profiles, snapshot, pol))
    return plan, weakref.ref(ws)


class RecordingPlacer(SingleHostPlacer):
    """The single-host placer, noting every search the rounds ask of it."""

    def __init__(self, by_class: bool | None) -> None:
        super().__init__(by_class)
        self.asked: list[tuple[str, bool]] = []

    def place(
        self, ws: Workspace, model_id: str, relax_domains: bool, dead: dict[str, RejectionCode]
    ) -> Choice:
        self.asked.append((model_id, relax_domains))
        return super().place(ws, model_id, relax_domains, dead)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planning_inputs(max_hosts=20))
def test_the_rounds_search_through_the_placer(inputs: Inputs) -> None:
    profiles, snapshot, pol = inputs
    for by_class in (None, False, True):
        placer = RecordingPlacer(by_class)
        plan, watched = _pipeline(inputs, placer)
        assert plan_bytes(plan) == plan_bytes(plan_placement(profiles, snapshot, pol))
        # replicas the rounds placed (not pins, kept incumbents or moved replicas)
        rounds = {
            a.model_id
            for a in plan.assignments
            if " replica " in a.reason and "moved" not in a.reason
        }
        assert rounds <= {model for model, _ in placer.asked}
        del placer
        assert watched() is None  # freed by reference counting: nothing else holds it
