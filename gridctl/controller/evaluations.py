"""``POST /allocator/evaluations``: operator-labelled quality for a model and workload.

Body: ``{"model_id", "workload", "quality": 0..1, "artifact_sha256"?}``. The
model must be configured and the workload in the catalog; an explicit
``artifact_sha256`` must equal the configured revision, so a score for old
weights cannot credit new ones. Quality is recorded in the outcome evidence
(it never creates demand) and forces a fresh portfolio solve.
"""

from __future__ import annotations

import math
from typing import Any

from gridctl.controller.control import Controller
from gridctl.errors import WireError


def record_evaluation(ctl: Controller, body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise WireError("body must be an object")
    desired = ctl.current_desired()
    if desired is None:
        raise WireError("no valid desired state yet")
    model_id, workload = body.get("model_id"), body.get("workload")
    profile = desired.profile(model_id) if isinstance(model_id, str) else None
    if profile is None:
        raise WireError("model_id must name a configured model", "/model_id")
    if workload not in desired.catalog.names:
        raise WireError("workload must be in the workload catalog", "/workload")
    quality = body.get("quality")
    if (
        isinstance(quality, bool)
        or not isinstance(quality, int | float)
        or not (math.isfinite(quality) and 0.0 <= quality <= 1.0)
    ):
        raise WireError("quality must be a number from 0 to 1", "/quality")
    sha = body.get("artifact_sha256")
    configured = profile.artifact.sha256
    if sha is not None and sha != configured:
        raise WireError(
            "artifact_sha256 does not match the configured revision", "/artifact_sha256"
        )
    ctl.demand.record_evaluation(
        profile.name, str(workload), configured, float(quality), ctl.clock()
    )
    ctl.mark_dirty()
    return {
        "model_id": profile.name,
        "workload": workload,
        "artifact_sha256": configured,
        "quality": float(quality),
    }
