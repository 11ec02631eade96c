"""Every command meets bad input with one line naming what, where and the fix: never a
traceback. Commands x bad operator-token files and bad controller settings, in-process
through ``main`` (an escaping exception fails the test) and, for a sample, as real processes
(no "Traceback" on stderr). The wrong-kind and stale tokens meet a real controller."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from gridctl.cli.main import main
from tests.e2e.harness import free_port

ROOT = Path(__file__).resolve().parents[2]

# commands that send the operator token; "{url}" is the controller under test
TOKEN_COMMANDS: dict[str, list[str]] = {
    "mode-set": ["mode", "recommend", "--reason", "review"],
    "mode-clear": ["mode", "--clear"],
    "tick": ["tick"],
    "plan-against": ["plan", str(ROOT / "policies"), "--against", "{url}"],
}


def missing(tmp: Path) -> Path:
    return tmp / "no-such.token"


def world_readable(tmp: Path) -> Path:
    path = tmp / "open.token"
    path.write_text("x" * 43 + "\n")
    path.chmod(0o644)
    return path


def not_text(tmp: Path) -> Path:
    path = tmp / "binary.token"
    path.write_bytes(b"\xff\xfe\x00garbage\x81" * 8)
    path.chmod(0o600)
    return path


def a_directory(tmp: Path) -> Path:
    path = tmp / "token-dir"
    path.mkdir(mode=0o700)
    return path


def too_short(tmp: Path) -> Path:
    path = tmp / "short.token"
    path.write_text("abc\n")
    path.chmod(0o600)
    return path


def wrong_token(tmp: Path) -> Path:
    """Well-formed, owner-only, and not this controller's (a stale one from another fleet)."""
    path = tmp / "stale.token"
    path.write_text("s" * 43 + "\n")
    path.chmod(0o600)
    return path


BAD_TOKENS: dict[str, Callable[[Path], Path]] = {
    "missing": missing,
    "mode-644": world_readable,
    "not-text": not_text,
    "directory": a_directory,
    "too-short": too_short,
    "wrong-token": wrong_token,
}


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real controller on loopback, desired state over the API (no watched directory)."""
    state = tmp_path_factory.mktemp("ctl")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (state / "controller.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gridctl",
            "controller",
            "--state",
            str(state / "s"),
            "--listen",
            f"127.0.0.1:{port}",
            "--no-context",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, (state / "controller.log").read_text()
        time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=30)
    log.close()


def one_error_line(err: str) -> str:
    """The one line of a refusal, checked for placeholders (every test here goes through
    this, so every bad-input message is scanned)."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    no_placeholder(lines[0])
    return lines[0]


@pytest.mark.parametrize("bad", sorted(BAD_TOKENS))
@pytest.mark.parametrize("command", sorted(TOKEN_COMMANDS))
def test_a_bad_token_file_is_one_line_naming_it(
    command: str,
    bad: str,
    controller: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    token = BAD_TOKENS[bad](tmp_path)
    argv = [a.replace("{url}", controller) for a in TOKEN_COMMANDS[command]]
    if "--against" not in argv:
        argv += ["--controller", controller]
    code = main([*argv, "--token-file", str(token)])
    line = one_error_line(capsys.readouterr().err)
    assert code == 1
    assert str(token) in line
    if bad == "wrong-token":
        assert "401" in line and "not this controller's operator token" in line


BAD_SETTINGS: dict[str, list[str]] = {
    "unreachable": ["--controller", "http://127.0.0.1:{dead}"],
    "missing-ca": ["--controller", "https://127.0.0.1:{dead}", "--ca-file", "/no/such/ca.pem"],
    "not-a-url": ["--controller", "ftp://127.0.0.1:{dead}"],
}
SETTING_COMMANDS: dict[str, list[str]] = {
    "status": ["status"],
    "status-json": ["status", "--json"],
    "mode-show": ["mode"],
    "mode-set": ["mode", "observe"],
    "tick": ["tick"],
    "diff": ["diff"],
}


@pytest.mark.parametrize("bad", sorted(BAD_SETTINGS))
@pytest.mark.parametrize("command", sorted(SETTING_COMMANDS))
def test_bad_controller_settings_are_one_line(
    command: str, bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = str(free_port())
    argv = [*SETTING_COMMANDS[command], *(a.replace("{dead}", dead) for a in BAD_SETTINGS[bad])]
    if command == "diff" and "--ca-file" in argv:
        argv = [a for a in argv if a not in ("--ca-file", "/no/such/ca.pem")]
    code = main(argv)
    line = one_error_line(capsys.readouterr().err)
    assert code in (1, 2)
    assert f"127.0.0.1:{dead}" in line and "token file" in line  # where it looked
    if bad == "unreachable" and command in ("status", "status-json", "mode-show", "diff"):
        assert code == 2 and "cannot reach" in line  # public reads: the network is the problem


@pytest.mark.parametrize(
    "argv",
    [
        ["mode", "recommend", "--token-file", "{tmp}/none.token"],
        ["node", "drain"],
        ["node", "status", "--host", "local-7"],
        ["apply", "{tmp}/none.json"],
        ["context", "use", "nowhere"],
        ["validate", "{tmp}/none"],
    ],
    ids=lambda argv: "-".join(a for a in argv if "{" not in a),
)
def test_real_processes_print_no_traceback(argv: list[str], tmp_path: Path) -> None:
    env = {**os.environ, "GRIDCTL_CONTROLLER": f"http://127.0.0.1:{free_port()}"}
    env["GRIDCTL_NODE_STATE"] = str(tmp_path / "node")
    result = subprocess.run(
        [sys.executable, "-m", "gridctl", *(a.replace("{tmp}", str(tmp_path)) for a in argv)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert result.returncode in (1, 2), result
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip(), result
    no_placeholder(result.stderr)


def test_forecast_reads_a_running_controllers_demand(
    controller: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["forecast", "--against", controller, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["controller"] == controller
    assert doc["models"] == [] and doc["admission"] == []  # no profiles, no requests yet
    assert main(["forecast", "--against", controller]) == 0
    assert f"learned demand of {controller}" in capsys.readouterr().out
    dead = f"http://127.0.0.1:{free_port()}"
    assert main(["forecast", "--against", dead]) == 2
    assert dead in one_error_line(capsys.readouterr().err)


# every command that talks to a controller, against one that is not there ("{dead}")
UNREACHABLE_COMMANDS: dict[str, list[str]] = {
    "status": ["status", "--controller", "{dead}"],
    "status-json": ["status", "--json", "--controller", "{dead}"],
    "mode-show": ["mode", "--controller", "{dead}"],
    "mode-set": ["mode", "observe", "--controller", "{dead}"],
    "mode-clear": ["mode", "--clear", "--controller", "{dead}"],
    "tick": ["tick", "--controller", "{dead}"],
    "diff": ["diff", "--controller", "{dead}"],
    "plan-against": ["plan", str(ROOT / "policies"), "--against", "{dead}"],
    "apply-plan": ["apply", "{plan}", "--controller", "{dead}"],
    "apply-dry-run": ["apply", str(ROOT / "policies"), "--dry-run", "--controller", "{dead}"],
    "apply-cancel": ["apply", "--cancel", "--controller", "{dead}"],
    "forecast": ["forecast", "--against", "{dead}"],
    "chat": ["chat", "hello", "--controller", "{dead}"],
    "join": [
        *("join", "--at", "http://127.0.0.1:9", "-m", "m", "--kind", "vllm"),
        *("--controller", "{dead}"),
    ],
    "join-remove": ["join", "--remove", "vendor", "--controller", "{dead}"],
}
PLACEHOLDERS = ("?/?", "/: ", ":0:0", " ?:", ": ?", "error:: ")


def no_placeholder(text: str) -> None:
    for fragment in PLACEHOLDERS:
        assert fragment not in text, (fragment, text)


def saved_plan_file(tmp: Path, against: str) -> Path:
    path = tmp / "plan.json"
    path.write_text(json.dumps({"format": "gridctl.plan/v1", "against": against, "actions": []}))
    return path


@pytest.mark.parametrize("token", ["valid", "missing"])
@pytest.mark.parametrize("command", sorted(UNREACHABLE_COMMANDS))
def test_an_unreachable_controller_is_exit_2_on_every_command(
    command: str, token: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    argv = [
        a.replace("{dead}", dead).replace("{plan}", str(saved_plan_file(tmp_path, dead)))
        for a in UNREACHABLE_COMMANDS[command]
    ]
    if command not in ("chat", "status", "status-json", "mode-show", "diff", "forecast"):
        path = wrong_token(tmp_path) if token == "valid" else missing(tmp_path)
        argv += ["--token-file", str(path)]
    code = main(argv)
    line = one_error_line(capsys.readouterr().err)
    assert code == 2, (argv, line)
    assert "cannot reach" in line and dead in line, line
    assert not line.startswith(f"error: {dead}"), line  # the URL is named once, in the reason
    no_placeholder(line)


BAD_PATHS: dict[str, list[str]] = {
    "validate-missing-dir": ["validate", "{tmp}/nosuchdir"],
    "validate-bad-yaml": ["validate", "{tmp}/badyaml"],
    "plan-missing-snapshot": ["plan", str(ROOT / "policies"), "--against", "{tmp}/none.json"],
    "plan-bad-yaml": ["plan", "{tmp}/badyaml", "--against", "{tmp}/none.json"],
    "apply-missing-plan": ["apply", "{tmp}/none.json"],
    "apply-not-json": ["apply", "{tmp}/badyaml/a.yaml"],
}


@pytest.mark.parametrize("command", sorted(BAD_PATHS))
def test_bad_paths_and_yaml_name_what_without_placeholders(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "badyaml"
    bad.mkdir()
    (bad / "a.yaml").write_text("apiVersion: gridctl/v1\nkind: [unclosed\n")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in BAD_PATHS[command]]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip(), err
    no_placeholder(err)
    assert str(tmp_path) in err or "a.yaml" in err, err


def test_status_and_dashboard_render_an_issue_without_placeholders() -> None:
    """A YAML syntax error has no kind, name or pointer: the controller's status carries it
    as JSON, and `status`, `dash` and `fleet watch` print it the way `validate` does."""
    from gridctl.cli.status_cmd import issue_line
    from gridctl.errors import ConfigIssue
    from gridctl.tui.viewmodel import render_issue

    syntax = {"file": "models/a.yaml", "line": 3, "column": 7, "message": "YAML syntax error"}
    assert issue_line(syntax) == "models/a.yaml:3:7: YAML syntax error"
    assert render_issue(syntax) == issue_line(syntax)
    nowhere = ConfigIssue("nosuchdir", 0, 0, message="no such file or directory")
    assert nowhere.render() == "nosuchdir: no such file or directory"
    full = ConfigIssue("m.yaml", 4, 3, "ModelProfile", "g", "/spec/memory_mb", "not an integer")
    assert full.render() == "m.yaml:4:3: ModelProfile/g: /spec/memory_mb: not an integer"
