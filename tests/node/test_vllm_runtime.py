"""The vLLM adapter's pure parts: its command line and environment (the engine key in
neither), the launcher that hands the key over, activity from a real ``/metrics`` page,
and how the node finds (or does not find) a vLLM interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gridctl.errors import PermanentError
from gridctl.node.runtimes.adapter import LaunchOptions, RuntimeAdapter, RuntimeFailure
from gridctl.node.runtimes.launching import EngineNetwork, EngineSettings
from gridctl.node.runtimes.registry import ADAPTER_KINDS
from gridctl.node.runtimes.vllm import (
    LAUNCHER,
    VllmRuntime,
    activity_from_metrics,
    metric_total,
)
from gridctl.node.runtimes.vllm_config import (
    PYTHON_ENV,
    READY_TIMEOUT_ENV,
    configured_niceness,
    configured_python,
    configured_ready_timeout,
    configured_runtime,
)

FIXTURES = Path(__file__).with_name("fixtures")
KEY = "engine-key-0123456789abcdef"


def runtime(tmp_path: Path, **kw: object) -> VllmRuntime:
    key_file = tmp_path / "engine.key"
    key_file.write_text(KEY + "\n")
    return VllmRuntime(
        python=Path(sys.executable),
        key_file=key_file,
        api_key=KEY,
        log_dir=tmp_path / "logs",
        models_dir=tmp_path / "vllm-models",
        **kw,  # type: ignore[arg-type]
    )


def test_the_argv_names_the_key_file_and_never_the_key(tmp_path: Path) -> None:
    built = runtime(tmp_path, settings=EngineSettings(parallel=3))
    argv = built.argv("smol", tmp_path / "hf", 23001)
    assert not any(KEY in part for part in argv)
    assert argv[:5] == [sys.executable, str(LAUNCHER), "--api-key-file", str(built.key_file), "--"]
    assert "--api-key" not in argv
    after = argv[5:]
    assert after[after.index("--model") + 1] == str(tmp_path / "hf")
    assert after[after.index("--served-model-name") + 1] == "smol"
    assert after[after.index("--max-model-len") + 1] == "512"
    assert after[after.index("--max-num-seqs") + 1] == "3"  # the heartbeat's max_concurrency
    assert after[after.index("--host") + 1] == "127.0.0.1"
    assert after[after.index("--port") + 1] == "23001"
    assert "--enforce-eager" in after and "--ssl-keyfile" not in after


def test_an_advertised_node_serves_tls_with_its_engine_certificate(tmp_path: Path) -> None:
    network = EngineNetwork(
        advertise="192.0.2.7", cert_file=tmp_path / "c.pem", key_file=tmp_path / "k.pem"
    )
    built = runtime(tmp_path, network=network)
    argv = built.argv("smol", tmp_path / "hf", 23001)
    assert argv[argv.index("--host") + 1] == "192.0.2.7"
    assert argv[argv.index("--ssl-keyfile") + 1] == str(tmp_path / "k.pem")
    assert argv[argv.index("--ssl-certfile") + 1] == str(tmp_path / "c.pem")
    assert built.endpoint(23001) == "https://192.0.2.7:23001"


def test_llama_cpp_only_options_are_refused_by_name(tmp_path: Path) -> None:
    built = runtime(tmp_path)
    for options in (LaunchOptions(chat_template="gemma"), LaunchOptions(embeddings=True)):
        with pytest.raises(RuntimeFailure) as refused:
            built.argv("m", tmp_path, 1, options.chat_template, options.embeddings)
        assert refused.value.reason == "vllm_options_unsupported"


def test_the_environment_is_offline_and_carries_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GRIDCTL_NODE_SECRET", "s3cret")
    monkeypatch.setenv("VLLM_API_KEY", "inherited")
    env = runtime(tmp_path, settings=EngineSettings(threads=1)).environment()
    assert "VLLM_API_KEY" not in env and "GRIDCTL_NODE_SECRET" not in env
    assert KEY not in json.dumps(env)
    assert env["HF_HUB_OFFLINE"] == env["TRANSFORMERS_OFFLINE"] == "1"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1" and env["OMP_NUM_THREADS"] == "1"


def test_the_launcher_reads_the_key_file_and_runs_the_server_with_the_rest(
    tmp_path: Path,
) -> None:
    """The real launcher script, with a stand-in ``vllm`` package that reports what the
    server module would have seen (its argv and the key in its environment)."""
    server = tmp_path / "pkgs" / "vllm" / "entrypoints" / "openai"
    server.mkdir(parents=True)
    for folder in (server, server.parent, server.parent.parent):
        (folder / "__init__.py").write_text("")
    (server / "api_server.py").write_text(
        "import json, os, sys\n"
        "if __name__ == '__main__':\n"
        "    print(json.dumps({'argv': sys.argv[1:], 'key': os.environ.get('VLLM_API_KEY')}))\n"
    )
    built = runtime(tmp_path)
    argv = built.argv("smol", tmp_path / "hf", 23001)
    env = {**built.environment(), "PYTHONPATH": str(tmp_path / "pkgs")}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=True)
    seen = json.loads(done.stdout)
    assert seen == {"argv": argv[5:], "key": KEY}
    empty = tmp_path / "empty.key"
    empty.write_text("\n")
    bad = [argv[0], argv[1], "--api-key-file", str(empty), "--", *argv[5:]]
    failed = subprocess.run(bad, capture_output=True, text=True, env=env, timeout=60)
    assert failed.returncode != 0 and "empty" in failed.stderr


def test_activity_from_a_real_metrics_page() -> None:
    """Captured from vLLM 0.32's /metrics while two completions were running."""
    page = (FIXTURES / "vllm_metrics_busy.txt").read_text("utf-8")
    seen = activity_from_metrics(page, slots=2)
    assert seen is not None
    assert (seen.slots, seen.processing, seen.queued) == (2, 2, 0)
    # the per-reason gauge shares the prefix and must not be summed in
    assert metric_total(page, "vllm:num_requests_waiting") == 0
    idle = page.replace('model_name="smol"} 2.0', 'model_name="smol"} 0.0')
    assert activity_from_metrics(idle, slots=2) == type(seen)(slots=2, processing=0, queued=0)


def test_activity_is_unknown_without_the_gauges() -> None:
    assert activity_from_metrics("# HELP nothing\nother_metric 3\n", slots=2) is None
    assert (
        metric_total('vllm:num_requests_running{a="b"} NaN\n', "vllm:num_requests_running") is None
    )


@given(st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=6))
def test_the_gauge_is_summed_over_engines(values: list[int]) -> None:
    page = "".join(
        f'vllm:num_requests_waiting{{engine="{i}",model_name="m"}} {v}.0\n'
        f'vllm:num_requests_waiting_by_reason{{engine="{i}",reason="capacity"}} 99.0\n'
        for i, v in enumerate(values)
    )
    assert metric_total(page, "vllm:num_requests_waiting") == sum(values)


def test_no_interpreter_named_means_no_vllm_runtime(tmp_path: Path) -> None:
    assert configured_python({}) is None
    assert configured_python({PYTHON_ENV: "  "}) is None
    with pytest.raises(PermanentError, match=PYTHON_ENV):
        configured_python({PYTHON_ENV: str(tmp_path / "missing")})
    assert configured_python({PYTHON_ENV: sys.executable}) == Path(sys.executable)
    assert configured_ready_timeout({}) == 600.0
    assert configured_ready_timeout({READY_TIMEOUT_ENV: "900"}) == 900.0
    for bad in ("soon", "0", "-5", "nan"):
        with pytest.raises(PermanentError, match=READY_TIMEOUT_ENV):
            configured_ready_timeout({READY_TIMEOUT_ENV: bad})
    assert configured_niceness({"GRIDCTL_VLLM_NICE": "10"}) == 10
    with pytest.raises(PermanentError):
        configured_niceness({"GRIDCTL_VLLM_NICE": "40"})


def test_the_node_offers_vllm_only_when_configured(tmp_path: Path) -> None:
    def build(environ: dict[str, str]) -> VllmRuntime | None:
        return configured_runtime(
            tmp_path / "state",
            EngineSettings(),
            key_file=tmp_path / "k",
            api_key=KEY,
            network=EngineNetwork(),
            environ=environ,
        )

    assert build({}) is None
    found = build({PYTHON_ENV: sys.executable, READY_TIMEOUT_ENV: "420"})
    assert isinstance(found, RuntimeAdapter) and found.name == "vllm"
    assert found.settings.ready_timeout == 420.0
    assert found.models.root == tmp_path / "state" / "vllm-models"
    assert ADAPTER_KINDS["vllm"] is VllmRuntime


def test_qualify_without_vllm_fails_its_inventory_step_by_name(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != PYTHON_ENV}
    env["PYTHONPATH"] = str(root)
    state_dir = tmp_path / "node"
    done = subprocess.run(
        [sys.executable, "-m", "gridctl", "node", "qualify", "vllm", "smollm2-135m",
         "--state-dir", str(state_dir)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "inventory  FAIL [engine_not_configured]" in done.stdout
    assert PYTHON_ENV in done.stdout and "qualify: inventory: FAIL" in done.stderr
    assert "vllm NOT qualified on this host; no evidence written" in done.stdout
    assert not (state_dir / "qualifications").exists()
