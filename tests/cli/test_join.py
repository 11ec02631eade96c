"""``gridctl join`` and ``gridctl join --remove`` against a real controller process and a
real loopback OpenAI engine: one-line errors, exit 2 for a command line that cannot run
(and for an unreachable controller, in ``test_bad_inputs``), --json answers."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gridctl.cli.main import main
from tests.cli.test_bad_inputs import ROOT, one_error_line
from tests.controller.openai_engine import OpenAIEngine
from tests.e2e.harness import free_port

READY_WAIT_SECONDS = 60.0


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A real controller on loopback: its URL and its operator token file."""
    state = tmp_path_factory.mktemp("ctl")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (state / "controller.log").open("wb")
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "gridctl", "controller", "--state", str(state / "s")),
            *("--listen", f"127.0.0.1:{port}", "--no-context"),
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
    yield url, state / "s" / "operator.token"
    proc.terminate()
    proc.wait(timeout=30)
    log.close()


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["join"], "needs --at URL, -m MODEL, --kind"),
        (["join", "--at", "http://127.0.0.1:9", "--kind", "vllm"], "needs -m MODEL"),
        (["join", "--remove", "vendor", "--at", "http://127.0.0.1:9"], "drop --at"),
        (["join", "--at", "http://127.0.0.1:9", "-m", "m", "--kind", "vllm", "--force"], "--force"),
    ],
)
def test_a_join_that_cannot_run_is_one_line_and_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert says in one_error_line(capsys.readouterr().err)


def routable(url: str, name: str) -> bool:
    status = httpx.get(url + "/allocator/status", timeout=5).json()
    rows = [r for h in status["hosts"] if h["host_id"] == name for r in h["residencies"]]
    return bool(rows) and all(r["routable"] for r in rows)


def test_join_then_remove_an_external_engine(
    controller: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url, token = controller
    where = ["--controller", url, "--token-file", str(token)]
    engine = OpenAIEngine(models=["m"]).start()
    try:
        joined = main(
            [
                *("join", "--at", engine.endpoint, "-m", "m", "--kind", "vllm"),
                *("--name", "vendor", "--serves", "completions", "--json", *where),
            ]
        )
        assert joined == 0
        answer = json.loads(capsys.readouterr().out)
        assert answer == {
            "host_id": "vendor",
            "model_id": "m",
            "kind": "vllm",
            "serves": "completions",
            "api_key": "none",
        }
        deadline = time.monotonic() + READY_WAIT_SECONDS
        while not routable(url, "vendor"):  # the controller's own probe loop
            assert time.monotonic() < deadline, "the external route never became routable"
            time.sleep(0.1)
        assert engine.probes >= 1

        assert main(["join", "--remove", "vendor", *where]) == 1
        assert "only routable replica of 'm'" in one_error_line(capsys.readouterr().err)
        assert main(["join", "--remove", "vendor", "--force", "--json", *where]) == 0
        assert json.loads(capsys.readouterr().out) == {"removed": "vendor", "model_ids": ["m"]}
        assert main(["join", "--remove", "vendor", *where]) == 1
        line = one_error_line(capsys.readouterr().err)
        assert "404" in line and "no external engine named 'vendor'" in line
        status = httpx.get(url + "/allocator/status", timeout=5).json()
        assert "vendor" not in [h["host_id"] for h in status["hosts"]]
    finally:
        engine.stop()


def test_join_with_the_engines_api_key_from_a_file(
    controller: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, token = controller
    where = ["--controller", url, "--token-file", str(token)]
    key = "sk-gateway-5b1f0c2a"
    key_file = tmp_path / "engine.key"
    key_file.write_text(key + "\n")
    empty = tmp_path / "empty.key"
    empty.write_text("\n")
    join = [*("join", "-m", "m", "--kind", "vllm", "--name", "keyed", *where)]
    engine = OpenAIEngine(models=["m"], api_key=key).start()
    try:
        for bad, says in ((tmp_path / "missing.key", "missing.key"), (empty, "is empty")):
            assert main([*join, "--at", engine.endpoint, "--api-key-file", str(bad)]) == 2
            assert says in one_error_line(capsys.readouterr().err)
        assert httpx.get(url + "/allocator/status", timeout=5).json()["hosts"] == []
        assert (
            main([*join, "--at", engine.endpoint, "--api-key-file", str(key_file), "--json"]) == 0
        )
        assert json.loads(capsys.readouterr().out)["api_key"] == "set"
        deadline = time.monotonic() + READY_WAIT_SECONDS
        while not routable(url, "keyed"):  # the probes send the key
            assert time.monotonic() < deadline, "the keyed route never became routable"
            time.sleep(0.1)
        answer = httpx.post(
            url + "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            timeout=30,
        )
        assert answer.status_code == 200 and engine.served == 1
        assert key not in httpx.get(url + "/allocator/status", timeout=5).text
        assert main(["join", "--remove", "keyed", "--force", *where]) == 0
    finally:
        engine.stop()
    logs = "".join(p.read_text(errors="replace") for p in token.parent.parent.glob("*.log"))
    assert logs and key not in logs
