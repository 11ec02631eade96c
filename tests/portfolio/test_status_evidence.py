"""What status shows behind each portfolio decision: evidence age, samples, freshness, edges."""

from __future__ import annotations

from gridctl.demand.learning import WorkloadDemand
from gridctl.demand.outcomes import OutcomeScore
from gridctl.domain import ControllerPolicy, FleetSnapshot
from gridctl.planner.portfolio_scan import _evidence_facts, gate
from gridctl.planner.portfolio_types import PortfolioInputs
from gridctl.tui.viewmodel import admission_rows

WEEK = 604_800.0


def test_candidate_evidence_facts_show_samples_age_and_freshness() -> None:
    score = OutcomeScore(
        "m", "coding", "a" * 64, 12.5, 0.6, 0.9, 1.2, 3.0, 0.8, 0.3, WEEK, 2 * WEEK, 1.5
    )
    facts = _evidence_facts(score, WEEK)
    assert facts == {
        "samples": 12.5,
        "evaluations": 3.0,
        "service_age_seconds": WEEK,
        "quality_age_seconds": 2 * WEEK,
        "service_freshness": 0.5,
        "quality_freshness": 0.25,
    }
    assert _evidence_facts(None, WEEK) == {}


def test_a_proactive_admission_names_its_learned_edge_and_confidence() -> None:
    anticipated = WorkloadDemand(
        "video", 0, 0.0, 0.0, 0.0, 0.0, 0.0, 6.0, ("image",), anticipated_confidence=0.8
    )
    inputs = PortfolioInputs((), FleetSnapshot(now=0.0), ControllerPolicy(), (anticipated,))
    found = gate(anticipated, inputs, spare_proof=False)
    assert (found.path, found.edge, found.edge_confidence) == ("anticipated", "image -> video", 0.8)


def test_the_admission_panel_rows_carry_the_evidence_and_edge() -> None:
    status = {
        "admission": [{"workload": "video", "state": "planned", "model_id": "vid"}],
        "portfolio": {
            "gates": [
                {"workload": "video", "workload_edge": "image -> video", "edge_confidence": 0.8}
            ],
            "candidates": [
                {
                    "workload": "video",
                    "model": "vid",
                    "effective_samples": 4.0,
                    "confidence": 0.2,
                    "quality_confidence": 0.0,
                    "evidence_age_seconds": 30.0,
                    "evidence_freshness": 0.99,
                    "exploration_bonus": 4.8,
                }
            ],
        },
    }
    (row,) = admission_rows(status)
    assert row.evidence == (
        "learned edge: image -> video (confidence 0.80)",
        "evidence: 4.0 samples, confidence 0.20, quality confidence 0.00, age 30s, "
        "freshness 0.99, exploration bonus 4.80",
    )
