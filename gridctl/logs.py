"""How the controller and node daemons write their logs: text for people, JSON for pipelines.

``--log-format text`` (the default) keeps the familiar one-line format on a
terminal. ``--log-format json`` writes one JSON object per line, with ``time``
(UTC, ISO 8601), ``level``, ``logger`` and ``message`` always, and ``host``,
``model``, ``action_id``, ``plan_generation``, ``term`` and ``event`` when the
line is about an action, so Loki or Elastic can index a fleet's logs by host,
model or action id.

Those context fields come from a log call's ``extra`` (``action_fields`` builds
it) or from the process's bound fields (``bind``: a node binds its host id).
Nothing else from a record is serialised: only the formatted message and the
named fields leave the process, so an argument or attribute that happens to hold
a credential is never written by the formatter itself. Escaping is
``json.dumps``'s.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

LOG_FORMATS = ("text", "json")
DEFAULT_LOG_FORMAT = "text"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# the context a line may carry, in the order a reader meets them
CONTEXT_FIELDS = ("host", "model", "action_id", "plan_generation", "term", "event")

_bound: dict[str, object] = {}
_bound_lock = threading.Lock()


def bind(**fields: object) -> None:
    """Fields every later line of this process carries unless its ``extra`` says otherwise
    (e.g. ``bind(host="laptop-1")`` in a node daemon); ``None`` unbinds one."""
    unknown = sorted(set(fields) - set(CONTEXT_FIELDS))
    if unknown:
        raise ValueError(f"unknown log context field(s): {', '.join(unknown)}")
    with _bound_lock:
        for name, value in fields.items():
            if value is None:
                _bound.pop(name, None)
            else:
                _bound[name] = value


def action_fields(
    *,
    action_id: object = None,
    host: object = None,
    model: object = None,
    plan_generation: object = None,
    term: object = None,
    event: str | None = None,
) -> dict[str, object]:
    """A log call's ``extra`` for a line about one action (unknown fields left out)."""
    given = {
        "action_id": action_id,
        "host": host,
        "model": model,
        "plan_generation": plan_generation,
        "term": term,
        "event": event,
    }
    return {k: v for k, v in given.items() if v is not None}


def command_fields(command: Mapping[str, Any], event: str) -> dict[str, object]:
    """``action_fields`` of a wire command (``wire/command.schema.json``) as a node sees it."""
    return action_fields(
        action_id=command.get("action_id"),
        host=command.get("node_id"),
        model=command.get("model_id"),
        plan_generation=command.get("plan_generation"),
        term=command.get("controller_term"),
        event=event,
    )


def _scalar(value: object) -> object:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


class JsonLogFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, tz=UTC)
        doc: dict[str, object] = {
            "time": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        with _bound_lock:
            bound = dict(_bound)
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is None:
                value = bound.get(name)
            if value is not None:
                doc[name] = _scalar(value)
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            doc["stack"] = self.formatStack(record.stack_info)
        return json.dumps(doc, ensure_ascii=False, default=str)


def formatter(log_format: str) -> logging.Formatter:
    if log_format == "json":
        return JsonLogFormatter()
    if log_format == "text":
        return logging.Formatter(TEXT_FORMAT)
    raise ValueError(f"--log-format: {log_format!r} is not one of {', '.join(LOG_FORMATS)}")


def configure(log_format: str, level: int) -> None:
    """Set up this process's logging on stderr, as ``logging.basicConfig`` does (nothing
    changes when handlers are already installed, e.g. under a test's log capture).

    In json mode Python warnings and uncaught exceptions (any thread) are logged too, so
    no stray traceback breaks the one-object-per-line stream.
    """
    handler = logging.StreamHandler()
    handler.setFormatter(formatter(log_format))
    logging.basicConfig(level=level, handlers=[handler])
    if log_format != "json":
        return
    logging.captureWarnings(True)
    crashed = logging.getLogger("gridctl.crash")

    def log_uncaught(
        kind: type[BaseException], value: BaseException, tb: TracebackType | None
    ) -> None:
        if issubclass(kind, KeyboardInterrupt):
            sys.__excepthook__(kind, value, tb)
            return
        crashed.critical("uncaught %s", kind.__name__, exc_info=(kind, value, tb))

    def log_thread_uncaught(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is None:
            return
        name = args.thread.name if args.thread is not None else "?"
        crashed.critical(
            "uncaught %s in thread %s",
            args.exc_type.__name__,
            name,
            exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
        )

    sys.excepthook = log_uncaught
    threading.excepthook = log_thread_uncaught


def add_log_format_argument(parser: Any) -> None:
    """``--log-format`` as every long-running command spells it."""
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=DEFAULT_LOG_FORMAT,
        help="text: one readable line per record (default); json: one JSON object per "
        "line with time, level, logger, message and, when known, host, model, action_id, "
        "plan_generation and term",
    )
