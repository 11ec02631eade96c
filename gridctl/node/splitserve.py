"""A coordinator's warm: read its ``split_serve`` and fence it on this host's own claim.

A warm that carries ``split_serve`` starts a split's coordinator engine
(``llama-server --rpc``) over the stages it lists. Before anything starts, the
command is read field by field (a malformed object is refused
``malformed_command``, naming the field) and judged by the specification's load
fence (``gridctl.split.judge_load``) against the claim this host's own
``StageHost`` accepted for the same model artifact: in gridctl's placement the
coordinator host is always the host of stage 0, so it holds the generation's
claim. A refusal carries the library's reason (``missing_claim``,
``term_mismatch``, ``topology_run_mismatch``, ``expired_lease``, ...), with one
node-side refinement: a load of an *older* term than the claim held is refused
``stale_term``, as the same late command's stop is (the library's load rule calls
any other term ``term_mismatch``).

Beyond the fence, the node refuses a warm it could not serve: no stage host here
(``no_stage_host``), a coordinator other than this host (``not_coordinator``), a
claim whose own stage no longer serves (``stage_not_serving``: released, or its
lease ended), and stages that disagree with this host's accepted stage
(``stage_mismatch``). What passes is a ``SplitLaunch``: the serve and this node's
fleet identity, which the actuator's forwarders present to the stages.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gridctl.domain.actions import SplitServe, SplitServeStage
from gridctl.errors import WireError
from gridctl.node.splitlinks import SplitLaunch, stage_address
from gridctl.node.stageclaims import HeldClaim
from gridctl.node.stagecommands import StageAnswer
from gridctl.node.stagehost import StageHost
from gridctl.split import ClaimKey, FenceReason, StageLoad, judge_load

_CLAIM_TEXT = ("model_id", "package_ref", "manifest_sha256", "coordinator_id", "topology_id",
               "run_id")  # fmt: skip
_STAGE_INTEGERS = ("layer_start", "layer_end")


def _text(data: Mapping[str, object], name: str, pointer: str) -> str:
    value = data.get(name)
    if not isinstance(value, str):
        raise WireError(f"must be a string, got {value!r}", f"{pointer}/{name}")
    return value


def _integer(data: Mapping[str, object], name: str, pointer: str) -> int:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise WireError(f"must be an integer, got {value!r}", f"{pointer}/{name}")
    return value


def _stage(data: object, pointer: str, layer_start: int) -> SplitServeStage:
    if not isinstance(data, Mapping):
        raise WireError("must be an object", pointer)
    start, end = (_integer(data, name, pointer) for name in _STAGE_INTEGERS)
    if start != layer_start:
        raise WireError(f"must be {layer_start} (stages are contiguous), got {start}",
                        f"{pointer}/layer_start")  # fmt: skip
    if end <= start:
        raise WireError(f"must be above layer_start {start}, got {end}", f"{pointer}/layer_end")
    stage = SplitServeStage(
        host_id=_text(data, "host_id", pointer),
        endpoint=_text(data, "endpoint", pointer),
        layer_start=start,
        layer_end=end,
    )
    stage_address(stage, pointer)
    return stage


def split_serve(data: object) -> SplitServe:
    """A ``SplitServe`` from the wire's ``split_serve``; ``WireError`` names the first bad field."""
    if not isinstance(data, Mapping):
        raise WireError("must be an object", "/split_serve")
    claim = data.get("claim")
    if not isinstance(claim, Mapping):
        raise WireError("must be an object", "/split_serve/claim")
    texts = {name: _text(claim, name, "/split_serve/claim") for name in _CLAIM_TEXT}
    term = _integer(claim, "coordinator_term", "/split_serve/claim")
    if term < 1:
        raise WireError(f"must be at least 1, got {term}", "/split_serve/claim/coordinator_term")
    rows = data.get("stages")
    if not isinstance(rows, list) or not 2 <= len(rows) <= 64:
        raise WireError("must be a list of 2 to 64 stages", "/split_serve/stages")
    stages: list[SplitServeStage] = []
    for index, row in enumerate(rows):
        start = stages[-1].layer_end if stages else 0
        stages.append(_stage(row, f"/split_serve/stages/{index}", start))
    return SplitServe(
        model_id=texts["model_id"],
        package_ref=texts["package_ref"],
        manifest_sha256=texts["manifest_sha256"],
        coordinator_id=texts["coordinator_id"],
        coordinator_term=term,
        topology_id=texts["topology_id"],
        run_id=texts["run_id"],
        stages=tuple(stages),
    )


def _refused(reason: str, message: str) -> StageAnswer:
    return StageAnswer("rejected", reason, message)


def judge_coordinator_warm(
    held: HeldClaim | None, serve: SplitServe, host_id: str, now_ms: int
) -> StageAnswer | None:
    """Why host ``host_id``, holding ``held`` for the serve's model artifact, must refuse
    to coordinate ``serve`` at ``now_ms``; None when it may. Pure."""
    if serve.coordinator_id != host_id:
        return _refused("not_coordinator", f"the split's coordinator is {serve.coordinator_id!r}")
    current = None if held is None else held.stage_claim.claim
    load = StageLoad(serve.model_id, serve.package_ref, serve.manifest_sha256,
                     serve.coordinator_id, serve.coordinator_term, serve.topology_id,
                     serve.run_id)  # fmt: skip
    decision = judge_load(current, load, now_ms)
    if not decision.accepted:
        reason = decision.reason or FenceReason.TERM_MISMATCH
        if current is not None and serve.coordinator_term < current.coordinator_term:
            reason = FenceReason.STALE_TERM  # a late command of a superseded generation
        held_term = "none" if current is None else current.coordinator_term
        return _refused(reason.value, f"load fence: {reason.value} (claim held: term {held_term})")
    if held is None:  # never: a fenced load (term >= 1) is accepted only under a claim
        return _refused("missing_claim", "load fence: no claim held")
    if not held.serving:
        return _refused("stage_not_serving", "this host's own stage of the split is not serving")
    own = held.stage_claim.stage
    mine = serve.stages[own.index] if own.index < len(serve.stages) else None
    expected = (host_id, own.layer_start, own.layer_end)
    if (
        len(serve.stages) != own.count
        or mine is None
        or (mine.host_id, mine.layer_start, mine.layer_end) != expected
    ):
        return _refused(
            "stage_mismatch",
            f"this host accepted stage {own.index + 1} of {own.count}, layers "
            f"{own.layer_start}-{own.layer_end - 1}; the warm lists another topology",
        )
    return None


def coordinator_warm(
    stages: StageHost | None, command: Mapping[str, Any], now_ms: int
) -> SplitLaunch | StageAnswer:
    """The launch a coordinator warm may make, or the receipt refusing it (nothing started)."""
    try:
        serve = split_serve(command.get("split_serve"))
    except WireError as exc:
        return _refused("malformed_command", str(exc)[:1024])
    if stages is None:
        return _refused("no_stage_host", "this host runs no split stage, so it cannot coordinate")
    model_id = str(command["model_id"])
    if serve.model_id != model_id:
        return _refused("model_mismatch", f"split is for {serve.model_id!r}, warm for {model_id!r}")
    held = stages.book.current(ClaimKey(serve.model_id, serve.package_ref, serve.manifest_sha256))
    refusal = judge_coordinator_warm(held, serve, str(command["node_id"]), now_ms)
    if refusal is not None:
        return refusal
    return SplitLaunch(serve, stages.settings.identity)
