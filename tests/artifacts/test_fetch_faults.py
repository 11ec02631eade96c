"""Transfer faults on real processes: a real artifact server, ``gridctl artifacts fetch``.

Each test starts the real Starlette app under uvicorn in its own process (with a
drill fault at the ASGI boundary where one is needed) and the real CLI, and
reads the server's own log to see what went over the wire.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.artifacts.conftest import (
    REPO_ROOT,
    ServerProcess,
    fetch_cli,
    make_weights,
    wait_until,
)

pytestmark = pytest.mark.e2e
MIB = 1024 * 1024
Start = Callable[..., ServerProcess]


def published(into: Path) -> list[str]:
    objects = into / "objects"
    return sorted(p.name for p in objects.iterdir()) if objects.exists() else []


def partials(into: Path) -> list[str]:
    staging = into / "staging"
    return sorted(p.name for p in staging.glob("*.partial")) if staging.exists() else []


def test_a_dropped_connection_resumes_with_a_range_request(
    tmp_path: Path, artifact_server: Start
) -> None:
    weights = make_weights(tmp_path / "hub", 8 * MIB)
    server = artifact_server(weights.root, "--drop-at", "0.3")
    into = tmp_path / "cache"
    done = fetch_cli(weights, into, server.url)
    assert done.returncode == 0, done.stderr
    assert len(server.lines("drill: dropped the connection")) == 1
    wait_until(lambda: "status=206 sent=" in server.log(), what="the resumed request's log line")
    resumed = [m for m in re.finditer(r"range=bytes=(\d+)- status=206 sent=(\d+)", server.log())]
    assert len(resumed) == 1, server.log()
    offset, sent = int(resumed[0].group(1)), int(resumed[0].group(2))
    assert 0 < offset <= int(8 * MIB * 0.3) and offset + sent == 8 * MIB
    assert published(into) == [f"{weights.sha256}.gguf"] and partials(into) == []
    assert (into / "objects" / f"{weights.sha256}.gguf").read_bytes() == weights.data
    assert "resumed at byte" in done.stdout


def test_a_killed_fetch_resumes_after_restart(tmp_path: Path, artifact_server: Start) -> None:
    weights = make_weights(tmp_path / "hub", 8 * MIB)
    # 1 MiB/s: the kill lands about 7 s before the end even on a busy machine
    server = artifact_server(weights.root, "--bytes-per-second", str(MIB))
    into = tmp_path / "cache"
    env = {**os.environ, "GRIDCTL_HF_ENDPOINT": server.url}
    argv = [sys.executable, "-m", "gridctl", "artifacts", "fetch", weights.source]
    argv += ["--sha256", weights.sha256, "--size-mb", "64", "--into", str(into), "--quiet"]
    first = subprocess.Popen(argv, env=env, cwd=REPO_ROOT, stderr=subprocess.DEVNULL)
    partial = into / "staging" / f"{weights.sha256}.partial"
    wait_until(lambda: partial.exists() and partial.stat().st_size > MIB, what="bytes staged")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    kept = partial.stat().st_size
    assert MIB < kept < 8 * MIB and published(into) == []
    done = fetch_cli(weights, into, server.url, "--quiet")
    assert done.returncode == 0, done.stderr
    # the server writes its access line once the response has ended: wait for it
    wait_until(lambda: "status=206" in server.log(), what="the resumed request's log line")
    offsets = [int(m) for m in re.findall(r"range=bytes=(\d+)- status=206", server.log())]
    assert offsets and offsets[0] >= kept - MIB and offsets[0] > 0, server.log()
    assert (into / "objects" / f"{weights.sha256}.gguf").read_bytes() == weights.data
    assert partials(into) == []


def test_wrong_bytes_are_a_digest_error_and_the_old_cache_stays(
    tmp_path: Path, artifact_server: Start
) -> None:
    weights = make_weights(tmp_path / "hub", 2 * MIB)
    server = artifact_server(weights.root)
    into = tmp_path / "cache"
    assert fetch_cli(weights, into, server.url).returncode == 0
    before = (into / "objects" / f"{weights.sha256}.gguf").read_bytes()
    wanted = hashlib.sha256(b"the release the operator approved").hexdigest()
    lying = type(weights)(weights.root, weights.data, wanted)
    done = fetch_cli(lying, into, server.url)
    assert done.returncode == 1
    assert "artifact_digest_mismatch" in done.stderr and wanted in done.stderr
    assert weights.sha256 in done.stderr  # what the bytes actually hashed to
    assert published(into) == [f"{weights.sha256}.gguf"] and partials(into) == []
    assert (into / "objects" / f"{weights.sha256}.gguf").read_bytes() == before


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_a_stream_above_the_ceiling_is_refused_before_it_is_read(
    tmp_path: Path, artifact_server: Start, declared: bool
) -> None:
    size = 48 * MIB
    weights = make_weights(tmp_path / "hub", size)
    server = artifact_server(weights.root, *([] if declared else ["--no-length"]))
    into = tmp_path / "cache"
    done = fetch_cli(weights, into, server.url, size_mb=2)
    assert done.returncode == 1
    assert "artifact_too_large" in done.stderr and "ceiling" in done.stderr
    assert str(2 * MIB) in done.stderr
    assert published(into) == [] and partials(into) == []
    wait_until(lambda: bool(server.lines(" sent=")), what="the server to log the response")
    sent = int(re.findall(r" sent=(\d+) of=\d+ (\w+)", server.log())[0][0])
    assert sent < size, server.log()  # the client hung up long before the end


def test_not_found_and_unauthorized_give_clear_refusals(
    tmp_path: Path, artifact_server: Start
) -> None:
    weights = make_weights(tmp_path / "hub", MIB)
    token_file = tmp_path / "hub.token"
    token_file.write_text("s3cret-token\n")
    token_file.chmod(0o600)
    server = artifact_server(weights.root, "--token-file", str(token_file), cli=True)
    into = tmp_path / "cache"
    refused = fetch_cli(weights, into, server.url)
    assert refused.returncode == 1
    assert "artifact_unauthorized" in refused.stderr and "HTTP 401" in refused.stderr
    assert weights.source in refused.stderr
    source = "hf://acme/tiny-model/nope.gguf"
    missing = type(weights)(weights.root, weights.data, weights.sha256, source)
    absent = fetch_cli(missing, into, server.url, token_file=token_file)
    assert absent.returncode == 1
    assert "artifact_not_found" in absent.stderr and "nope.gguf" in absent.stderr
    assert published(into) == [] and partials(into) == []
    allowed = fetch_cli(weights, into, server.url, token_file=token_file)
    assert allowed.returncode == 0, allowed.stderr
    assert published(into) == [f"{weights.sha256}.gguf"]
    # A refusal is final for this attempt: no retry storm against the origin.
    assert len(server.lines("tiny.Q4.gguf status=401")) == 1
    assert len(server.lines("nope.gguf status=404")) == 1
