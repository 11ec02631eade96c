"""The large documents the controller serves (status, dry run, snapshot): which host rows they
carry, and how they are written.

A plan's per-host candidate rows grow with hosts x models, so the status and the dry run
carry each model's hosts folded into groups alike (``gridctl.planner.plan_document``) and
every host's row only for the models a reader asks for: ``?explain=MODEL`` (repeatable)
or ``?explain_all=true``, the query ``gridctl plan --explain`` and the dashboard's
selected model send. A model the desired state does not hold is refused (400 naming
``explain``), as ``gridctl plan --explain`` refuses it.

The status document is cached per status revision without rows; ``with_explanations``
adds the rows asked for to a copy, from the plan that document was built from.
``DocumentResponse`` writes them with orjson (``gridctl.jsontext``): the same bytes as
Starlette's ``JSONResponse``, many times faster on a large fleet.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import QueryParams
from starlette.responses import JSONResponse

from gridctl.domain import Plan
from gridctl.errors import WireError
from gridctl.jsontext import encode_json
from gridctl.planner.plan_document import explanation_json

MAX_EXPLAINED = 512  # models named in one query
TRUE_WORDS = ("true", "1", "yes")
FALSE_WORDS = ("false", "0", "no", "")


@dataclass(frozen=True)
class ExplainQuery:
    """The models whose every host row a reader wants (all of them with ``every``)."""

    models: tuple[str, ...] = ()
    every: bool = False

    def __bool__(self) -> bool:
        return self.every or bool(self.models)

    def wants(self, model_id: str) -> bool:
        return self.every or model_id in self.models


def explain_query(params: QueryParams) -> ExplainQuery:
    """``?explain=MODEL&explain=...&explain_all=true`` read; ``WireError`` naming the field."""
    models = params.getlist("explain")
    if len(models) > MAX_EXPLAINED:
        raise WireError(f"explain names at most {MAX_EXPLAINED} models", "explain")
    for model in models:
        if not model or len(model) > 253:
            raise WireError("explain must name a model (1-253 characters)", "explain")
    raw = params.get("explain_all", "false").lower()
    if raw not in TRUE_WORDS + FALSE_WORDS:
        raise WireError("explain_all must be true or false", "explain_all")
    return ExplainQuery(tuple(sorted(set(models))), raw in TRUE_WORDS)


def check_known(query: ExplainQuery, profiles: Collection[str]) -> None:
    """Refuse a model the desired state does not hold (400 naming ``explain``)."""
    for model in query.models:
        if model not in profiles:
            raise WireError(f"explain: no such model profile {model!r}", "explain")


def explained_rows(plan: Plan | None, query: ExplainQuery) -> dict[str, Any]:
    """Every host's row of each model asked for; a profile the plan holds no rows for
    maps to null."""
    rows: dict[str, Any] = {}
    if plan is not None:
        rows = {
            e.model_id: explanation_json(e) for e in plan.explanations if query.wants(e.model_id)
        }
    for model in query.models:
        rows.setdefault(model, None)
    return rows


def with_explanations(
    document: dict[str, Any], plan: Plan | None, query: ExplainQuery
) -> dict[str, Any]:
    """A copy of a status document whose plan carries the rows asked for (the document
    itself, unchanged, when none are asked for or it holds no plan)."""
    if not query or not isinstance(document.get("plan"), dict):
        return document
    shown = dict(document["plan"])
    shown["explanations"] = explained_rows(plan, query)
    return {**document, "plan": shown}


class DocumentResponse(JSONResponse):
    """``JSONResponse`` written by orjson (compact, keys in their order, UTF-8)."""

    def render(self, content: Any) -> bytes:
        return encode_json(content)


__all__ = [
    "DocumentResponse",
    "ExplainQuery",
    "check_known",
    "explain_query",
    "explained_rows",
    "with_explanations",
]
