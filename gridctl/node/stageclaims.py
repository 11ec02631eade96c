"""A stage host's accepted split claims: judged by ``gridctl.split``, kept across restarts.

A host that serves one stage of a split model may run its RPC stage server only
while it holds an accepted coordinator claim for that model artifact. The rules
(shape, supersession by term, stale and conflicting terms, lease expiry, which
stops are stale) are the pure library's ``ClaimRegistry``; this module adds what
a node needs around them:

* the stage's own part of the topology (index and layer range) travels with the
  claim, and is validated field by field like any wire message;
* every accepted claim is written to the node state store before it is acted on,
  so a restarted node holds the same claims and still refuses the same stale
  terms; a refused claim writes nothing;
* each claim is *serving* (its stage server should run) or not: a release or an
  expired lease ends the serving but keeps the claim, because it still fences
  older terms.

Time is an argument (``now_ms``); nothing here reads a clock or starts a process.
``gridctl.node.stagehost`` turns the outcomes into started and stopped processes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields

from gridctl.errors import WireError
from gridctl.node.statestore import NodeStateStore
from gridctl.split import (
    Claim,
    ClaimDecision,
    ClaimKey,
    ClaimRegistry,
    FenceReason,
    StageWork,
    StopDecision,
    StopRequest,
    judge_claim,
)


@dataclass(frozen=True)
class StageAssignment:
    """This host's part of the split: stage ``index`` of ``count``, layers [start, end)."""

    index: int
    count: int
    layer_start: int
    layer_end: int


@dataclass(frozen=True)
class StageClaim:
    """A coordinator claim as a stage host receives it: the claim and this stage's part."""

    claim: Claim
    stage: StageAssignment

    @property
    def key(self) -> ClaimKey:
        return self.claim.key

    @property
    def work_id(self) -> str:
        """The id of the stage server this claim runs, in the registry's work list."""
        key, term = self.key, self.claim.coordinator_term
        return f"{key.model_id}|{key.package_ref}|{key.manifest_sha256}@{term}"

    def as_json(self) -> dict[str, object]:
        return {"claim": asdict(self.claim), "stage": asdict(self.stage)}


@dataclass(frozen=True)
class HeldClaim:
    """An accepted claim and whether its stage server should be running now."""

    stage_claim: StageClaim
    serving: bool


@dataclass(frozen=True)
class ClaimOutcome:
    """What offering a claim did: the library's decision, and what to start and stop.

    ``ended`` are the claims whose stage servers must stop (older terms fenced by
    this one); ``started`` is the claim whose stage server must now run, if it was
    not already running under the same epoch.
    """

    decision: ClaimDecision
    ended: tuple[StageClaim, ...] = ()
    started: StageClaim | None = None


_CLAIM_TEXT = ("model_id", "package_ref", "manifest_sha256", "coordinator_id", "topology_id",
               "run_id", "participant_set_hash", "topology_hash")  # fmt: skip
_CLAIM_INTEGERS = ("coordinator_term", "lease_until_unix_ms")
_STAGE_INTEGERS = tuple(f.name for f in fields(StageAssignment))


def _integer(data: Mapping[str, object], name: str, pointer: str) -> int:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise WireError(f"must be an integer, got {value!r}", f"{pointer}/{name}")
    return value


def _text(data: Mapping[str, object], name: str, pointer: str) -> str:
    value = data.get(name)
    if not isinstance(value, str):
        raise WireError(f"must be a string, got {value!r}", f"{pointer}/{name}")
    return value


def _object(data: Mapping[str, object], name: str) -> Mapping[str, object]:
    value = data.get(name)
    if not isinstance(value, Mapping):
        raise WireError("must be an object", f"/{name}")
    return value


def stage_assignment(data: Mapping[str, object]) -> StageAssignment:
    """A validated ``StageAssignment``; ``WireError`` names the first bad field."""
    index, count, start, end = (_integer(data, name, "/stage") for name in _STAGE_INTEGERS)
    if count < 1:
        raise WireError(f"must be at least 1, got {count}", "/stage/count")
    if not 0 <= index < count:
        raise WireError(f"must be within 0..{count - 1}, got {index}", "/stage/index")
    if start < 0:
        raise WireError(f"must be at least 0, got {start}", "/stage/layer_start")
    if end <= start:
        raise WireError(f"must be above layer_start {start}, got {end}", "/stage/layer_end")
    return StageAssignment(index, count, start, end)


def stage_claim(data: Mapping[str, object]) -> StageClaim:
    """A ``StageClaim`` from its JSON object; ``WireError`` names the first bad field.

    Only the types are checked here: a claim with an empty field or term 0 is
    well-formed and is refused by the fence with the library's named reason.
    """
    claim_data, stage_data = _object(data, "claim"), _object(data, "stage")
    texts = {name: _text(claim_data, name, "/claim") for name in _CLAIM_TEXT}
    term, lease = (_integer(claim_data, name, "/claim") for name in _CLAIM_INTEGERS)
    claim = Claim(
        model_id=texts["model_id"],
        package_ref=texts["package_ref"],
        manifest_sha256=texts["manifest_sha256"],
        coordinator_id=texts["coordinator_id"],
        coordinator_term=term,
        topology_id=texts["topology_id"],
        run_id=texts["run_id"],
        participant_set_hash=texts["participant_set_hash"],
        topology_hash=texts["topology_hash"],
        lease_until_unix_ms=lease,
    )
    return StageClaim(claim, stage_assignment(stage_data))


class StageClaimBook:
    """This node's accepted claims: the library registry plus the node state store."""

    def __init__(self, store: NodeStateStore) -> None:
        self._store = store
        self._registry = ClaimRegistry()
        self._held: dict[ClaimKey, HeldClaim] = {}
        for data, serving in store.split_claims():
            held = HeldClaim(stage_claim(data), serving)
            claim = held.stage_claim.claim
            # Replayed at an instant inside its lease, as when it was accepted: the
            # registry then holds exactly the claim it accepted before the restart.
            replay = self._registry.accept(claim, claim.lease_until_unix_ms - 1)
            if not replay.accepted:
                raise WireError(f"stored split claim refused on replay: {replay.reason}", "/claim")
            self._remember(held)

    def held(self) -> tuple[HeldClaim, ...]:
        """Every accepted claim, sorted by artifact key."""
        return tuple(self._held[key] for key in sorted(self._held))

    def current(self, key: ClaimKey) -> HeldClaim | None:
        return self._held.get(key)

    def serving(self) -> tuple[StageClaim, ...]:
        return tuple(h.stage_claim for h in self.held() if h.serving)

    def offer(self, offered: StageClaim, now_ms: int) -> ClaimOutcome:
        """Judge a claim; on acceptance persist it, and say what to stop and start."""
        before = self._held.get(offered.key)
        same_epoch = before is not None and before.stage_claim.claim.same_epoch(offered.claim)
        if same_epoch and before is not None and before.stage_claim.stage != offered.stage:
            # the same generation cannot give this host another part of the model
            held_term = before.stage_claim.claim.coordinator_term
            reason = FenceReason.CONFLICTING_SAME_TERM
            return ClaimOutcome(ClaimDecision(False, reason, current_term=held_term))
        # The library's pure rule first, so the claim is on disk before the registry
        # (or anything else) acts on it; the registry then decides the same.
        preview = judge_claim(self._registry.current(offered.key), offered.claim, now_ms)
        if not preview.accepted:
            return ClaimOutcome(preview)
        held = HeldClaim(offered, serving=True)
        self._persist(held)
        decision = self._registry.accept(offered.claim, now_ms)
        self._remember(held)
        fenced = {work.work_id for work in decision.stages_to_shut_down}
        ended: tuple[StageClaim, ...] = ()
        if before is not None and before.stage_claim.work_id in fenced:
            ended = (before.stage_claim,)
        already_running = before is not None and before.serving and same_epoch
        return ClaimOutcome(decision, ended, None if already_running else offered)

    def release(self, stop: StopRequest, now_ms: int) -> tuple[StopDecision, StageClaim | None]:
        """Judge a coordinator's stop; an accepted one ends the serving (the claim stays).

        Returns the decision and the claim whose stage server must stop, if one ran.
        """
        decision = self._registry.check_stop(stop, now_ms)
        held = self._held.get(stop.key)
        if not decision.accepted or held is None or not held.serving:
            return decision, None
        self._end(held)
        return decision, held.stage_claim

    def expire(self, now_ms: int) -> tuple[StageClaim, ...]:
        """End the serving of every claim whose lease ended before ``now_ms``."""
        ended = []
        for held in self.held():
            if held.serving and held.stage_claim.claim.lease_until_unix_ms < now_ms:
                self._end(held)
                ended.append(held.stage_claim)
        return tuple(ended)

    def _end(self, held: HeldClaim) -> None:
        stopped = HeldClaim(held.stage_claim, serving=False)
        self._persist(stopped)
        self._remember(stopped)

    def _persist(self, held: HeldClaim) -> None:
        key = held.stage_claim.key
        triple = (key.model_id, key.package_ref, key.manifest_sha256)
        self._store.put_split_claim(triple, held.stage_claim.as_json(), held.serving)

    def _remember(self, held: HeldClaim) -> None:
        """Keep ``held`` and make the registry's work list say what runs under it."""
        previous = self._held.get(held.stage_claim.key)
        if previous is not None:
            self._registry.release(previous.stage_claim.work_id)
        self._held[held.stage_claim.key] = held
        if held.serving:
            claim = held.stage_claim.claim
            self._registry.track(
                StageWork(
                    work_id=held.stage_claim.work_id,
                    model_id=claim.model_id,
                    package_ref=claim.package_ref,
                    manifest_sha256=claim.manifest_sha256,
                    coordinator_term=claim.coordinator_term,
                )
            )
