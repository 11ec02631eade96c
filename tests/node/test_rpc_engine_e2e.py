"""llama.cpp's RPC backend, real processes: Gemma served from two stage servers on loopback.

Two ``ggml-rpc-server`` stage servers and one ``llama-server --rpc A,B -ngl 99`` hold
Gemma 3 270M's layers between them; a greedy completion must give exactly the tokens
the same ``llama-server`` gives alone, and both stage servers must hold part of the
weights (llama-server connects to them even with ``-ngl 0``, so a connection alone
proves nothing). The stage server is in the engine only when it
was built with ``-DGGML_RPC=ON`` (scripts/bootstrap does): without it the test is
skipped, except under ``CI``, where a missing stage server is the bootstrap's failure.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path

import httpx
import psutil
import pytest

from gridctl.artifacts.sources import local_path
from gridctl.node.runtimes.llamacpp import default_binary
from gridctl.node.runtimes.stage_server import default_stage_server
from tests.node.conftest import GEMMA_SOURCE, free_port_range

pytestmark = pytest.mark.e2e

READY_SECONDS = 120.0  # a cold llama-server maps and sends Gemma's weights in seconds
PROMPT = "The capital of France is"


def _stage_server() -> Path:
    found = default_stage_server()
    if found is not None:
        return found
    if os.environ.get("CI"):
        pytest.fail(
            "ggml-rpc-server is not installed beside llama-server, and under CI the engine "
            "must have been built with -DGGML_RPC=ON by scripts/bootstrap"
        )
    pytest.skip(
        "ggml-rpc-server is not installed beside llama-server: this engine was built without "
        "-DGGML_RPC=ON (run scripts/bootstrap to build the RPC-enabled engine)"
    )


def _log_tail(log: Path, lines: int = 20) -> str:
    text = log.read_text(errors="replace") if log.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


def _wait_until(ready: Callable[[], bool], child: subprocess.Popen[bytes], log: Path) -> None:
    """Poll ``ready`` until it holds, failing early if the child exits; bounded."""
    deadline = time.monotonic() + READY_SECONDS
    while not ready():
        if child.poll() is not None:
            pytest.fail(f"{log.stem} exited with {child.returncode}:\n{_log_tail(log)}")
        if time.monotonic() > deadline:
            pytest.fail(f"{log.stem} not ready after {READY_SECONDS:.0f}s:\n{_log_tail(log)}")
        time.sleep(0.1)


@contextmanager
def _child(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A child writing to ``log``, stopped (then killed) when the block ends, however."""
    with log.open("wb") as out:
        child = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    try:
        yield child
    finally:
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(timeout=10)


def _listening(pid: int, port: int) -> bool:
    """The stage server listens on 127.0.0.1:port (seen by the kernel, no probe connection)."""
    try:
        sockets = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.Error:
        return False
    return any(
        s.status == psutil.CONN_LISTEN and s.laddr and tuple(s.laddr) == ("127.0.0.1", port)
        for s in sockets
    )


def _resident_mb(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss) >> 20


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _complete(port: int) -> str:
    answer = httpx.post(
        f"http://127.0.0.1:{port}/completion",
        json={"prompt": PROMPT, "n_predict": 8, "temperature": 0, "seed": 1, "cache_prompt": False},
        timeout=120,
    )
    assert answer.status_code == 200, answer.text
    content = answer.json()["content"]
    assert isinstance(content, str)
    return content


def _engine_argv(binary: Path, weights: Path, port: int) -> list[str]:
    return [
        str(binary), "--host", "127.0.0.1", "--port", str(port), "-m", str(weights),
        "-c", "512", "-t", "1", "--no-webui",
    ]  # fmt: skip


def test_gemma_split_over_two_stage_servers_answers_as_one_host(tmp_path: Path) -> None:
    stage_binary = _stage_server()
    engine = default_binary()
    weights = local_path(GEMMA_SOURCE)
    ports = free_port_range(4)
    split_port, alone_port, *stage_ports = range(ports.first, ports.first + 4)
    logs = {name: tmp_path / f"{name}.log" for name in ("stage-1", "stage-2", "split", "alone")}
    with ExitStack() as children:
        stages = []
        for name, port in zip(("stage-1", "stage-2"), stage_ports, strict=True):
            argv = [str(stage_binary), "-H", "127.0.0.1", "-p", str(port), "-t", "1"]
            stages.append((children.enter_context(_child(argv, logs[name])), port, logs[name]))
        for stage, port, log in stages:
            _wait_until(partial(_listening, stage.pid, port), stage, log)

        idle_mb = [_resident_mb(stage.pid) for stage, _, _ in stages]

        rpc = ",".join(f"127.0.0.1:{port}" for port in stage_ports)
        split_argv = [*_engine_argv(engine, weights, split_port), "--rpc", rpc, "-ngl", "99"]
        split = children.enter_context(_child(split_argv, logs["split"]))
        _wait_until(partial(_healthy, split_port), split, logs["split"])
        from_split = _complete(split_port)
        # the layers went to the stage servers: each holds a share, together half the file or more
        grown_mb = [
            _resident_mb(stage.pid) - idle
            for (stage, _, _), idle in zip(stages, idle_mb, strict=True)
        ]
        weights_mb = weights.stat().st_size >> 20
        assert min(grown_mb) >= 8 and sum(grown_mb) >= weights_mb // 2, (grown_mb, weights_mb)

        alone = children.enter_context(
            _child(_engine_argv(engine, weights, alone_port), logs["alone"])
        )
        _wait_until(partial(_healthy, alone_port), alone, logs["alone"])
        from_one_host = _complete(alone_port)

        print(f"\nsplit ({grown_mb} MB on the stages): {from_split!r}; alone: {from_one_host!r}")
        assert from_split.strip(), f"the split engine answered nothing:\n{_log_tail(logs['split'])}"
        assert from_split == from_one_host  # greedy decoding: the same tokens either way
        for _stage, _port, log in stages:
            assert "Accepted client connection" in log.read_text(errors="replace"), _log_tail(log)
