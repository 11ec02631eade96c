"""Where the controller's desired state comes from: a watched directory or the API.

With ``--watch`` the directory is the source of truth and profile writes over
HTTP are refused (409 naming the directory). Without it, operators manage
profiles with ``PUT``/``DELETE /allocator/models/{id}``; each change produces a
new revision, and the store keeps them across restarts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from gridctl.config import resolving
from gridctl.config.revision import content_digest
from gridctl.config.schemas import fill_defaults
from gridctl.config.semantics import Checked, check_profile
from gridctl.config.yamlsource import SourceDocument
from gridctl.controller.registry import validate_wire
from gridctl.controller.watching import DesiredSource
from gridctl.domain import ControllerPolicy, DesiredState
from gridctl.errors import WireError


class DesiredProvider(Protocol):
    @property
    def current(self) -> DesiredState | None: ...

    def status(self) -> dict[str, object]: ...


class ApiDesired:
    """Profiles set over the HTTP API (no watched directory)."""

    def __init__(
        self,
        clock: Callable[[], float],
        documents: dict[str, dict[str, Any]] | None = None,
        policy: ControllerPolicy | None = None,
        on_change: Callable[[DesiredState, dict[str, dict[str, Any]]], None] | None = None,
        revision: str | None = None,
    ) -> None:
        self._clock = clock
        self._on_change = on_change
        self._lock = threading.Lock()
        self._documents: dict[str, dict[str, Any]] = dict(documents or {})
        self._policy = policy or ControllerPolicy()
        self._changed_at: float | None = None
        self.current: DesiredState | None = None
        self._rebuild()
        if revision and self.current is not None:  # restored: keep the revision it had (an
            self.current = replace(self.current, revision=revision)  # applied plan's own)

    def _rebuild(self) -> None:
        docs = [self._documents[k] for k in sorted(self._documents)]
        profiles = tuple(resolving.profile_from_document(d) for d in docs)
        self.current = DesiredState(
            revision=content_digest(docs),
            dirty=True,
            profiles=profiles,
            policy=self._policy,
            documents=len(docs),
        )
        self._changed_at = self._clock()

    def documents(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return dict(self._documents)

    def put(self, model_id: str, document: Any) -> DesiredState:
        """Create or replace one profile; raises ``WireError`` naming the bad field."""
        if not isinstance(document, dict):
            raise WireError("body must be a ModelProfile document", "")
        document = dict(document)
        document.setdefault("apiVersion", "gridctl/v1")
        document.setdefault("kind", "ModelProfile")
        document.setdefault("metadata", {"name": model_id})
        validate_wire("model-profile.schema.json", document)
        if document["metadata"].get("name") != model_id:
            raise WireError("metadata.name does not match the URL", "/metadata/name")
        filled = fill_defaults(document, "model-profile.schema.json")
        checked = Checked(
            SourceDocument("<api>", 0, filled, 0, 0), "ModelProfile", model_id, filled
        )
        problems = check_profile(checked)
        if problems:
            raise WireError(problems[0].message, problems[0].pointer)
        with self._lock:
            self._documents[model_id] = filled
            self._rebuild()
            assert self.current is not None
            current = self.current
        self._changed()
        return current

    def delete(self, model_id: str) -> bool:
        with self._lock:
            if model_id not in self._documents:
                return False
            del self._documents[model_id]
            self._rebuild()
        self._changed()
        return True

    def _changed(self) -> None:
        """Hand the new revision to the store so it survives a restart."""
        if self._on_change is not None and self.current is not None:
            self._on_change(self.current, self.documents())

    def adopt(self, state: DesiredState, documents: dict[str, dict[str, Any]]) -> None:
        """Make an operator-approved revision (an applied saved plan) the desired state.

        ``documents`` are its filled ModelProfile documents by name, so later
        ``PUT``/``DELETE`` calls edit on top of it; the revision is the plan's own.
        """
        with self._lock:
            self._documents = dict(documents)
            self._policy = state.policy
            self.current = state
            self._changed_at = self._clock()
        self._changed()

    def set_policy(self, policy: ControllerPolicy) -> None:
        with self._lock:
            self._policy = policy
            if self.current is not None:
                self.current = replace(self.current, policy=policy)

    def status(self) -> dict[str, object]:
        current = self.current
        return {
            "source": "api",
            "directory": None,
            "revision": current.revision if current else None,
            "dirty": True,
            "last_good_revision": current.revision if current else None,
            "last_good_at": self._changed_at,
            "latest_seen_revision": current.revision if current else None,
            "rejected_revision": None,
            "rejected": [],
            "warnings": [],
        }


__all__ = ["ApiDesired", "DesiredProvider", "DesiredSource"]
