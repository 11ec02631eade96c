"""Contexts: flags, then the environment, then the current context, then the defaults."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import pytest

from gridctl import contexts
from gridctl.cli.main import main
from tests.e2e.harness import free_port

URL = "http://127.0.0.1:22400"


def record_up_fleet(tmp_path: Path) -> contexts.Context:
    context = contexts.Context(
        name="local-22400",
        controller=URL,
        token_file=str(tmp_path / "controller" / "operator.token"),
        state_root=str(tmp_path),
        node_state_dirs={"local-1": str(tmp_path / "local-1")},
    )
    contexts.record(context)
    return context


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GRIDCTL_CONTROLLER", "GRIDCTL_TOKEN_FILE", "GRIDCTL_CA_FILE", "GRIDCTL_CONTEXT"):
        monkeypatch.delenv(name, raising=False)


def test_without_a_context_the_defaults_apply() -> None:
    target = contexts.resolve()
    assert target.controller == contexts.DEFAULT_CONTROLLER
    assert (target.context, target.controller_from, target.token_from) == (
        None,
        "default",
        "default",
    )


def test_the_current_context_names_controller_and_token(tmp_path: Path) -> None:
    context = record_up_fleet(tmp_path)
    target = contexts.resolve()
    assert (target.controller, str(target.token_file)) == (URL, context.token_file)
    assert target.context == "local-22400"
    assert "context local-22400" in target.describe() and context.token_file in target.describe()


def test_flags_and_environment_win_and_a_token_never_goes_to_another_controller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_up_fleet(tmp_path)
    other = contexts.resolve("http://127.0.0.1:22999")
    assert other.controller == "http://127.0.0.1:22999"
    assert other.context is None and other.token_from == "default"
    same = contexts.resolve(URL + "/")
    assert same.context == "local-22400" and same.token_from == "context local-22400"
    monkeypatch.setenv("GRIDCTL_TOKEN_FILE", "/elsewhere/token")
    assert str(contexts.resolve().token_file) == "/elsewhere/token"
    monkeypatch.setenv("GRIDCTL_CONTROLLER", "http://127.0.0.1:1")
    assert contexts.resolve().controller_from == "$GRIDCTL_CONTROLLER"


def test_controller_keeps_the_token_of_the_context_recorded_for_that_url(
    tmp_path: Path,
) -> None:
    """`--controller` alone, naming a known fleet (another spelling of the current one's URL,
    or another recorded context), keeps that context's token file."""
    context = record_up_fleet(tmp_path)
    alias = contexts.resolve("http://localhost:22400")
    assert alias.context == "local-22400" and str(alias.token_file) == context.token_file
    second = contexts.Context(
        name="lab", controller="http://127.0.0.1:22500", token_file=str(tmp_path / "lab.token")
    )
    contexts.record(second, make_current=False)
    other = contexts.resolve("http://127.0.0.1:22500/")
    assert other.context == "lab" and other.token_from == "context lab"
    assert contexts.resolve("http://127.0.0.1:22600").token_from == "default"


def test_an_unknown_controller_says_which_token_it_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record_up_fleet(tmp_path)
    code = main(["tick", "--controller", f"http://127.0.0.1:{free_port()}"])
    assert code == 2  # nothing listens there: that is said first
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        capsys.readouterr()
        assert main(["tick", "--controller", url]) == 1
        err = capsys.readouterr().err
        assert f"no context records {url}, so its operator token is unknown" in err, err
        assert "pass --token-file" in err
    finally:
        server.shutdown()
        server.server_close()


def test_context_commands_list_switch_and_show(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record_up_fleet(tmp_path)
    assert main(["context", "set", "lab", "--controller", "https://ctl.lab:22100", "--no-use"]) == 0
    capsys.readouterr()
    assert main(["context", "ls", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["current"] == "local-22400"
    assert [c["name"] for c in doc["contexts"]] == ["lab", "local-22400"]
    assert main(["context", "use", "lab"]) == 0
    capsys.readouterr()
    assert main(["context", "show", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["controller"] == "https://ctl.lab:22100"
    assert "export GRIDCTL_CONTROLLER=https://ctl.lab:22100" in shown["export"]
    assert main(["context", "use", "nope"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "known: lab, local-22400" in err


def test_a_broken_contexts_file_is_one_line_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    path = contexts.contexts_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{not json")
    assert main(["status"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "Traceback" not in err


def test_node_commands_find_a_host_through_the_context(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record_up_fleet(tmp_path)
    (tmp_path / "local-1").mkdir()
    assert (
        main(["node", "pause", "--host", "local-1", "--state-dir", str(tmp_path / "local-1")]) == 0
    )
    capsys.readouterr()
    assert main(["node", "status", "--host", "local-1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["host_state"] == "paused"
    assert main(["node", "drain", "--host", "local-9"]) == 1
    err = capsys.readouterr().err
    assert "local-9" in err and "context local-22400" in err and "local-1" in err


def test_context_names_follow_the_controller_address() -> None:
    assert contexts.context_name_for("http://127.0.0.1:22100") == "local"
    assert contexts.context_name_for("http://127.0.0.1:22400") == "local-22400"
    assert contexts.context_name_for("https://ctl-1.example:22100") == "ctl-1.example-22100"
