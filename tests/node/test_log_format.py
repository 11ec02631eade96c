"""The log formats: json lines carry exactly the named context fields, escaped by ``json``;
``--log-format`` reaches the controller, the node (and its detached child) and ``up``."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator

import pytest

from gridctl import logs
from gridctl.cli.main import build_parser
from gridctl.cli.node_cmd import _start_flags


def record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("gridctl.test", logging.WARNING, __file__, 1, message, args, None)
    for name, value in extra.items():
        setattr(made, name, value)
    return made


@pytest.fixture(autouse=True)
def _unbound() -> Iterator[None]:
    yield
    logs.bind(**dict.fromkeys(logs.CONTEXT_FIELDS))


def test_a_json_line_has_the_required_fields_and_only_the_known_context() -> None:
    line = logs.JsonLogFormatter().format(
        record(
            "drained %s",
            "gemma",
            **logs.action_fields(action_id="a1", host="h1", model="m", term=3),
            token="s3cret-never-written",
            plan_generation_extra="ignored",
        )
    )
    assert "\n" not in line
    doc = json.loads(line)
    assert doc["level"] == "warning" and doc["logger"] == "gridctl.test"
    assert doc["message"] == "drained gemma"
    assert doc["time"].endswith("Z") and "T" in doc["time"]
    assert (doc["action_id"], doc["host"], doc["model"], doc["term"]) == ("a1", "h1", "m", 3)
    assert "plan_generation" not in doc  # unknown stays out, not null
    assert "s3cret" not in line and "ignored" not in line


def test_hostile_text_is_escaped_by_json_and_stays_one_line() -> None:
    nasty = 'quote " backslash \\ newline \n tab \t nul \x00 bell \x07 snow \u2603 }{'
    line = logs.JsonLogFormatter().format(record("%s", nasty, model=nasty))
    assert "\n" not in line
    doc = json.loads(line)
    assert doc["message"] == nasty and doc["model"] == nasty


def test_an_exception_is_one_field_of_the_same_line() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        made = record("failed")
        made.exc_info = sys.exc_info()
    line = logs.JsonLogFormatter().format(made)
    assert "\n" not in line
    assert "RuntimeError: boom" in json.loads(line)["exception"]


def test_bound_fields_fill_in_and_a_lines_own_extra_wins() -> None:
    logs.bind(host="laptop-1")
    fmt = logs.JsonLogFormatter()
    assert json.loads(fmt.format(record("x")))["host"] == "laptop-1"
    assert json.loads(fmt.format(record("x", host="other")))["host"] == "other"
    logs.bind(host=None)
    assert "host" not in json.loads(fmt.format(record("x")))
    with pytest.raises(ValueError, match="password"):
        logs.bind(password="x")


def test_command_fields_read_the_wire_command() -> None:
    fields = logs.command_fields(
        {
            "action_id": "a1",
            "node_id": "h1",
            "model_id": "m",
            "plan_generation": "g:1:x",
            "controller_term": 2,
        },
        "delivered",
    )
    assert fields == {
        "action_id": "a1",
        "host": "h1",
        "model": "m",
        "plan_generation": "g:1:x",
        "term": 2,
        "event": "delivered",
    }


def test_text_stays_the_default_format() -> None:
    text = logs.formatter("text").format(record("hello %s", "you", action_id="a1"))
    assert text.endswith("WARNING gridctl.test: hello you")
    with pytest.raises(ValueError, match="--log-format"):
        logs.formatter("xml")


@pytest.mark.parametrize(
    "words",
    [
        ["controller", "--state", "s"],
        ["up"],
        ["node", "start", "--host-id", "h", "--controller", "http://127.0.0.1:1"],
    ],
)
def test_every_long_running_command_takes_log_format(words: list[str]) -> None:
    parser = build_parser(words[0])
    assert parser.parse_args(words).log_format == "text"
    assert parser.parse_args([*words, "--log-format", "json"]).log_format == "json"
    with pytest.raises(SystemExit):
        parser.parse_args([*words, "--log-format", "xml"])


def test_a_detached_node_passes_its_log_format_to_the_daemon(tmp_path: object) -> None:
    args = build_parser("node").parse_args(
        [
            "node",
            "start",
            "--host-id",
            "h",
            "--controller",
            "http://127.0.0.1:1",
            "--token-file",
            "t",
            "--state-dir",
            str(tmp_path),
            "--log-format",
            "json",
        ]
    )
    flags = _start_flags(args)
    assert flags[flags.index("--log-format") + 1] == "json"


def test_controller_events_are_records_with_the_action_context(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from gridctl.controller.eventlog import EventLog

    events = EventLog(lambda: 100.0)
    events.context = lambda: {"plan_generation": "g:7", "term": 4}
    with caplog.at_level(logging.INFO, logger="gridctl.controller.events"):
        events("delivered", action_id="a1", host_id="h1", model_id="m", message="warm")
        events.record("issued", {"action_id": "a2", "host_id": "h1"}, plan_generation="g:8")
    first, second = caplog.records
    doc = json.loads(logs.JsonLogFormatter().format(first))
    assert doc["message"] == "delivered action a1 host h1 model m: warm"
    assert (doc["action_id"], doc["host"], doc["model"]) == ("a1", "h1", "m")
    assert (doc["plan_generation"], doc["term"], doc["event"]) == ("g:7", 4, "delivered")
    assert json.loads(logs.JsonLogFormatter().format(second))["plan_generation"] == "g:8"
    # the rows status shows are what they were: no log-only field joins them
    assert set(events.rows()[0]) == {"at", "event", "host_id", "model_id", "action_id", "message"}
