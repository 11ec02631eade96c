"""The two fenced commands of a split's stage host: ``split_claim`` and ``split_release``.

A coordinator's claim reaches a stage host as an ordinary fenced command (the
controller's term and plan generation are checked at intake, like a load). Here the
command's ``split_claim`` object is read field by field (``stageclaims.stage_claim``)
and offered to the host's ``StageHost``, which judges it by ``gridctl.split``'s rules,
persists it and starts the stage server and its TLS tunnel; ``split_release`` is the
coordinator's stop. The answer is the command's receipt: ``succeeded`` with where the
stage is reached, or ``rejected`` with the library's reason (``stale_term``,
``conflicting_same_term``, ``expired_lease``, ...), so a replayed command of an old term
is refused by name and changes nothing.

A host without a stage server (no RPC build, not joined with a fleet identity, or no
advertised address) advertises neither capability and rejects both commands with
``no_stage_host``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gridctl.errors import WireError
from gridctl.node.stageclaims import stage_claim
from gridctl.node.stagehost import StageHost
from gridctl.split import StopRequest

SPLIT_KINDS = ("split_claim", "split_release")


@dataclass(frozen=True)
class StageAnswer:
    """The receipt a split command ends with."""

    status: str  # "succeeded" or "rejected"
    reason: str  # "" when it succeeded
    message: str


def _stop_request(data: Mapping[str, object]) -> StopRequest:
    texts = {}
    for name in ("model_id", "package_ref", "manifest_sha256"):
        value = data.get(name)
        if not isinstance(value, str):
            raise WireError(f"must be a string, got {value!r}", f"/split_stop/{name}")
        texts[name] = value
    coordinator = data.get("coordinator_id")
    if coordinator is not None and not isinstance(coordinator, str):
        raise WireError(
            f"must be a string or null, got {coordinator!r}", "/split_stop/coordinator_id"
        )
    term = data.get("coordinator_term")
    if isinstance(term, bool) or not isinstance(term, int):
        raise WireError(f"must be an integer, got {term!r}", "/split_stop/coordinator_term")
    return StopRequest(
        texts["model_id"], texts["package_ref"], texts["manifest_sha256"], coordinator, term
    )


def run_split_command(
    stages: StageHost | None, command: Mapping[str, Any], now_ms: int
) -> StageAnswer:
    """Offer a claim or a stop to this host's stages; never raises for a refusal."""
    if stages is None:
        return StageAnswer("rejected", "no_stage_host", "this host runs no split stage server")
    kind = command["kind"]
    model_id = str(command["model_id"])
    try:
        if kind == "split_claim":
            offered = stage_claim(command["split_claim"])
            if offered.claim.model_id != model_id:
                return StageAnswer(
                    "rejected",
                    "model_mismatch",
                    f"claim is for {offered.claim.model_id!r}, command for {model_id!r}",
                )
            outcome = stages.offer(offered, now_ms)
            decision = outcome.decision
            if not decision.accepted:
                reason = decision.reason.value if decision.reason is not None else "rejected"
                return StageAnswer("rejected", reason, f"claim refused: {reason}")
            running = stages.running().get(offered.key)
            stage = offered.stage
            where = ""
            if running is not None:
                host, port = running.advertised
                where = f" via {host}:{port}"
            return StageAnswer(
                "succeeded",
                "",
                f"stage {stage.index + 1} of {stage.count}, layers "
                f"{stage.layer_start}-{stage.layer_end - 1}, term "
                f"{offered.claim.coordinator_term}{where}",
            )
        stop = _stop_request(command["split_stop"])
        if stop.model_id != model_id:
            return StageAnswer(
                "rejected",
                "model_mismatch",
                f"stop is for {stop.model_id!r}, command for {model_id!r}",
            )
        released = stages.release(stop, now_ms)
        if not released.accepted:
            reason = released.reason.value if released.reason is not None else "rejected"
            return StageAnswer("rejected", reason, f"stop refused: {reason}")
        return StageAnswer("succeeded", "", f"stage of term {stop.coordinator_term} stopped")
    except WireError as exc:
        return StageAnswer("rejected", "malformed_command", str(exc)[:1024])
