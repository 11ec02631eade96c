"""``gridctl node qualify`` end to end: the real CLI, the real llama-server, the Gemma GGUF.

A passing run prints every step, exits 0, writes evidence the node then reports,
and leaves no child behind. A run with the wrong digest fails at the named
inventory step with exit 1, launches nothing, and records that the runtime is
not qualified. Bad input names its flag and writes nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from gridctl.node.qualification import STEP_NAMES, evidence_path, qualified_runtimes
from tests.node.conftest import GEMMA_SHA256, GEMMA_SOURCE, MODEL_ID

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def qualify(
    state_dir: Path, artifacts: Path, binary: Path, *extra: str, runtime: str = "llama.cpp"
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [
            sys.executable, "-m", "gridctl", "node", "qualify", runtime, MODEL_ID,
            "--state-dir", str(state_dir), "--artifact-dir", str(artifacts),
            "--llama-server", str(binary), "--engine-threads", "1", "--engine-ctx", "1024",
            *extra,
        ],
        capture_output=True, text=True, env=env, timeout=400, check=False,
    )  # fmt: skip


def test_qualify_passes_writes_evidence_and_leaves_nothing_running(
    tmp_path: Path, shared_artifacts: Path, llama_binary: Path
) -> None:
    state_dir = tmp_path / "node"
    done = qualify(
        state_dir, shared_artifacts, llama_binary,
        "--artifact-sha256", GEMMA_SHA256.upper(), "--artifact-source", GEMMA_SOURCE, "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["passed"] is True and [s["name"] for s in doc["steps"]] == list(STEP_NAMES)
    assert all(s["ok"] and s["reason"] == "ok" for s in doc["steps"])
    assert doc["artifact_sha256"] == GEMMA_SHA256 and doc["engine_version"]
    for name in STEP_NAMES:  # progress, step by step, on stderr
        assert f"qualify: {name}: pass" in done.stderr
    assert Path(doc["evidence"]) == evidence_path(state_dir, "llama.cpp")
    assert json.loads(Path(doc["evidence"]).read_text("utf-8"))["passed"] is True
    assert qualified_runtimes(state_dir) == ("llama.cpp",)
    pid = int(next(s for s in doc["steps"] if s["name"] == "identity")["detail"].split()[1])
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE

    # the human form of a second run: every step on one line, the verdict last
    again = qualify(state_dir, shared_artifacts, llama_binary)
    assert again.returncode == 0, again.stderr
    lines = again.stdout.splitlines()
    assert [line.split()[:2] for line in lines[:-1]] == [[n, "pass"] for n in STEP_NAMES]
    assert lines[-1].startswith("llama.cpp qualified on this host; evidence: ")


def test_qualify_passes_for_the_multi_model_router(
    tmp_path: Path, shared_artifacts: Path, llama_binary: Path
) -> None:
    state_dir = tmp_path / "node"
    done = qualify(
        state_dir, shared_artifacts, llama_binary,
        "--artifact-sha256", GEMMA_SHA256, "--artifact-source", GEMMA_SOURCE, "--json",
        runtime="llama.cpp-router",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["passed"] is True and doc["runtime"] == "llama.cpp-router"
    assert qualified_runtimes(state_dir) == ("llama.cpp-router",)
    pid = int(next(s for s in doc["steps"] if s["name"] == "identity")["detail"].split()[1])
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_wrong_digest_fails_the_inventory_step_by_name(
    tmp_path: Path, shared_artifacts: Path, llama_binary: Path
) -> None:
    state_dir = tmp_path / "node"
    first = qualify(
        state_dir, shared_artifacts, llama_binary,
        "--artifact-sha256", GEMMA_SHA256, "--artifact-source", GEMMA_SOURCE, "--json",
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    wrong = "0" * 64
    done = qualify(state_dir, shared_artifacts, llama_binary, "--artifact-sha256", wrong)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "inventory  FAIL [artifact_sha256_mismatch]" in done.stdout
    assert "qualify: inventory: FAIL" in done.stderr
    for name in STEP_NAMES[1:]:
        assert f"{name:<10} skipped" in done.stdout
    assert "llama.cpp NOT qualified on this host" in done.stdout
    doc = json.loads(evidence_path(state_dir, "llama.cpp").read_text("utf-8"))
    assert doc["passed"] is False and [s["name"] for s in doc["steps"]] == ["inventory"]
    assert qualified_runtimes(state_dir) == ()  # the latest run decides: claimed, not passed


def test_bad_input_names_the_flag_and_writes_nothing(
    tmp_path: Path, shared_artifacts: Path, llama_binary: Path
) -> None:
    state_dir = tmp_path / "node"
    done = qualify(state_dir, shared_artifacts, llama_binary, "--artifact-sha256", "xyz")
    assert done.returncode != 0 and "--artifact-sha256" in done.stderr
    assert qualified_runtimes(state_dir) is None
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    unknown = subprocess.run(
        [sys.executable, "-m", "gridctl", "node", "qualify", "ollama", MODEL_ID,
         "--state-dir", str(state_dir)],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert unknown.returncode != 0 and "RUNTIME" in unknown.stderr and "ollama" in unknown.stderr
    assert not state_dir.exists()
