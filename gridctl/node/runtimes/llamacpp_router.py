"""The multi-model llama.cpp runtime: one ``llama-server`` router process holds many models.

``llama-server --models-preset FILE`` runs in *router mode*: it serves one
OpenAI-compatible API, lists its models with their state (``GET /models``),
loads and unloads one model on request (``POST /models/load``,
``POST /models/unload``) and forwards each request to the model its ``model``
field names. Each loaded model runs in an instance process the router spawns
and stops; the node never signals those instances, only the router, by its
identity proof.

How the lifecycle maps onto one shared process (see docs/runtimes.md):

- the first warm writes the preset (every model the node's cache holds, so
  later warms can load theirs) and starts the router on the warm's port; later
  warms journal the running router's PID, port and proof for their residency
  and load their model into it;
- readiness is per model: the router lists the model as ``loaded`` and a
  one-token completion for exactly that model succeeds;
- health and activity are per model (``/models``, ``/slots?model=``,
  ``/metrics?model=``), so a broken model never marks its neighbours failed;
- an unload (:meth:`release`) unloads only that model; the router is stopped
  when its last model is unloaded;
- a node restart adopts the router by its proof and reads back which models it
  serves from ``GET /models``.

The router reads its model list only at start: a model that reached the cache
after the router started cannot be loaded into it (``router_model_unknown``)
until the router's last model is unloaded and it starts again.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from gridctl.node.processes import Liveness, stop_proven
from gridctl.node.records import ProcessIdentity
from gridctl.node.runtimes.adapter import (
    ChildFailed,
    EngineActivity,
    LaunchOptions,
    RuntimeFailure,
    SpawnJournal,
)
from gridctl.node.runtimes.launching import EngineNetwork, EngineSettings, child_environment
from gridctl.node.runtimes.llamacpp import LlamaCppRuntime, deferred_requests

RUNTIME_NAME = "llama.cpp-router"
_PRESET_UNSAFE = frozenset("[]\n\r=;#")


def preset_text(models: Mapping[str, Path], settings: EngineSettings) -> str:
    """The router's INI preset: one section per model id, the engine settings in each."""
    sections = []
    for model_id, path in sorted(models.items()):
        if not model_id or _PRESET_UNSAFE & set(model_id) or _PRESET_UNSAFE & set(str(path)):
            raise RuntimeFailure("router_model_unknown", f"{model_id!r} cannot name a preset")
        sections.append(
            f"[{model_id}]\nmodel = {path}\nparallel = {settings.parallel}\n"
            f"ctx-size = {settings.ctx_size}\nthreads = {settings.threads}\n"
            "metrics = true\nslots = true\n"
        )
    return "\n".join(sections)


class LlamaCppRouterRuntime(LlamaCppRuntime):
    """Several models in one ``llama-server`` router per node; see the module docstring."""

    name = RUNTIME_NAME

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
        catalog: Callable[[], Mapping[str, Path]] = dict,
    ) -> None:
        super().__init__(
            binary=binary,
            key_file=key_file,
            api_key=api_key,
            log_dir=log_dir,
            settings=settings,
            transport=transport,
            network=network,
        )
        self.catalog = catalog  # model id -> verified artifact, for the preset
        self.router: ProcessIdentity | None = None
        self.router_port: int | None = None
        self.known: dict[str, Path] = {}  # the models the running router can load
        self._router_lock = threading.RLock()  # the router's state; held across a launch

    @property
    def preset_path(self) -> Path:
        return self.log_dir / "router-models.ini"

    def router_argv(self, port: int) -> list[str]:
        net = self.network
        tls = (
            ["--ssl-key-file", str(net.key_file), "--ssl-cert-file", str(net.cert_file)]
            if net.tls
            else []
        )
        return [
            str(self.binary),
            "--host", net.bind,
            "--port", str(port),
            *tls,
            "--models-preset", str(self.preset_path),
            "--no-models-autoload",
            "--models-max", "0",
            "--api-key-file", str(self.key_file),
            "--no-webui",
            *self.settings.extra_args,
        ]  # fmt: skip

    # --- lifecycle --------------------------------------------------------------------

    def _router_alive(self) -> bool:
        return self.router is not None and self.prove_identity(self.router) is Liveness.PROVEN

    def start(
        self,
        model_id: str,
        artifact: Path,
        port: int,
        journal: SpawnJournal,
        options: LaunchOptions,
    ) -> ProcessIdentity:
        """Journal the shared router for this residency, starting it if none runs."""
        if options != LaunchOptions():
            raise RuntimeFailure(
                "router_options_unsupported",
                f"{model_id}: the shared router serves every model with the GGUF's own chat "
                "template and no embeddings; use the llama.cpp runtime for this profile",
            )
        with self._router_lock:
            if self._router_alive():
                assert self.router is not None and self.router_port is not None
                if self.known.get(model_id) != artifact:
                    raise RuntimeFailure(
                        "router_model_unknown",
                        f"the running router was started without {model_id} at {artifact}; "
                        "it can load it after its last model is unloaded",
                    )
                journal.spawned(model_id, self.router.pid, self.router_port)
                journal.proven(model_id, self.router)
                return self.router
            models = {**self.catalog(), model_id: artifact}
            self.preset_path.write_text(preset_text(models, self.settings), "utf-8")
            identity = self._launch(model_id, self.router_argv(port), port, journal)
            self.router, self.router_port, self.known = identity, port, models
            return identity

    def _launch(
        self, model_id: str, argv: list[str], port: int, journal: SpawnJournal
    ) -> ProcessIdentity:
        with open(self.log_path("router"), "ab") as log:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=child_environment(),
                close_fds=True,
                start_new_session=True,
            )
        return self._record_launch(popen, argv, model_id, port, journal, "router")

    def wait_ready(
        self,
        model_id: str,
        identity: ProcessIdentity,
        port: int,
        *,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> float:
        """Load the model into the router (once it answers), then wait for its readiness."""
        started = time.monotonic()
        deadline = started + self.settings.ready_timeout
        requested = False
        delay = 0.05
        while True:
            if self.prove_identity(identity) is not Liveness.PROVEN:
                detail = f"router exited while warming {model_id}; {self.log_tail('router')}"
                raise ChildFailed("child_exited", detail)
            state = self.model_state(model_id, port)
            if state in ("unloaded", "failed") and not requested:
                requested = self._call(port, "/models/load", model_id)
            elif state == "failed" or (
                state == "unloaded" and requested and self._settled(started)
            ):
                raise ChildFailed("model_failed", f"the router could not load {model_id}")
            if state == "loaded" and self.model_ready(model_id, port):
                return time.monotonic() - started
            if time.monotonic() >= deadline:
                raise ChildFailed("ready_timeout", f"{model_id} not ready in time")
            if cancelled():
                raise ChildFailed("cancelled", f"warming {model_id} was cancelled")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    @staticmethod
    def _settled(started: float) -> bool:
        return time.monotonic() - started > 5.0  # a load the router dropped, not one pending

    def release(
        self, model_id: str, identity: ProcessIdentity, port: int, *, grace: float = 10.0
    ) -> bool:
        """Unload only ``model_id``; stop the router when no model is left loaded.

        ``False`` if the router cannot be proven, or the model stays loaded.
        """
        with self._router_lock:
            if self.prove_identity(identity) is not Liveness.PROVEN:
                return self.prove_identity(identity) is Liveness.DEAD
            if self.model_state(model_id, port) not in ("unloaded", None):
                self._call(port, "/models/unload", model_id)
            deadline = time.monotonic() + grace + 10.0
            while self.model_state(model_id, port) not in ("unloaded", None):
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.1)
            states = self.model_states(port)
            if states is not None and not any(s != "unloaded" for s in states.values()):
                return self.stop(identity, grace=grace)
            return True

    def stop(self, identity: ProcessIdentity, *, grace: float = 10.0) -> bool:
        """Stop the whole router (and with it every model it holds), by its proof."""
        gone = stop_proven(identity, grace=grace)
        self.reap()
        if gone and self.router is not None and self.router.pid == identity.pid:
            self.router, self.router_port, self.known = None, None, {}
        return gone

    def adopt(self, model_id: str, identity: ProcessIdentity, port: int) -> Liveness:
        """Take a surviving router back by its proof and read which models it can serve."""
        liveness = self.prove_identity(identity)
        if liveness is Liveness.PROVEN:
            with self._router_lock:
                self.router, self.router_port = identity, port
                self.known = self.listed_artifacts(port)
        return liveness

    # --- probes -----------------------------------------------------------------------

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"}

    def _call(self, port: int, path: str, model_id: str) -> bool:
        try:
            with self._client() as client:
                response = client.post(
                    f"{self.endpoint(port)}{path}", json={"model": model_id}, headers=self._auth()
                )
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    def _models(self, port: int) -> list[dict[str, Any]] | None:
        try:
            with self._client() as client:
                response = client.get(f"{self.endpoint(port)}/models", headers=self._auth())
            listed = response.json().get("data") if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        return [m for m in listed if isinstance(m, dict)] if isinstance(listed, list) else None

    def model_states(self, port: int) -> dict[str, str] | None:
        """Each model the router lists and its state ("loaded", "loading", "unloaded"...)."""
        models = self._models(port)
        if models is None:
            return None
        states: dict[str, str] = {}
        for model in models:
            status = model.get("status")
            value = status.get("value") if isinstance(status, dict) else None
            if isinstance(model.get("id"), str) and isinstance(value, str):
                states[model["id"]] = value
        return states

    def model_state(self, model_id: str, port: int) -> str | None:
        states = self.model_states(port)
        return None if states is None else states.get(model_id)

    def listed_artifacts(self, port: int) -> dict[str, Path]:
        """The models the router can load and their files (its instances' ``--model``)."""
        found: dict[str, Path] = {}
        for model in self._models(port) or []:
            status = model.get("status")
            args = status.get("args") if isinstance(status, dict) else None
            if isinstance(args, list) and "--model" in args[:-1]:
                found[str(model.get("id"))] = Path(str(args[args.index("--model") + 1]))
        return found

    def model_ready(self, model_id: str, port: int) -> bool:
        """The router lists the model as loaded, and a one-token completion for it succeeds."""
        if self.model_state(model_id, port) != "loaded":
            return False
        try:
            with self._client() as client:
                response = client.post(
                    f"{self.endpoint(port)}/v1/completions",
                    json={"model": model_id, "prompt": "Hi", "max_tokens": 1},
                    headers=self._auth(),
                    timeout=max(self.settings.probe_timeout, 30.0),
                )
            choices = response.json().get("choices") if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return False
        return isinstance(choices, list) and bool(choices)

    def model_healthy(self, model_id: str, port: int) -> bool:
        """The periodic probe of one model: the router answers and lists it loaded."""
        return self.model_state(model_id, port) == "loaded"

    def model_activity(self, model_id: str, port: int) -> EngineActivity | None:
        """That model's busy slots and deferred requests, through the router."""
        try:
            with self._client() as client:
                slots = client.get(
                    f"{self.endpoint(port)}/slots", params={"model": model_id}, headers=self._auth()
                )
                metrics = client.get(
                    f"{self.endpoint(port)}/metrics",
                    params={"model": model_id},
                    headers=self._auth(),
                )
            listed = slots.json() if slots.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        if not isinstance(listed, list):
            return None
        busy = sum(1 for s in listed if isinstance(s, dict) and s.get("is_processing"))
        queued = deferred_requests(metrics.text) if metrics.status_code == 200 else 0
        return EngineActivity(slots=len(listed), processing=busy, queued=queued)

    def model_wait_idle(self, model_id: str, port: int, *, timeout: float) -> EngineActivity | None:
        """Drain one model: poll its activity until nothing runs or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while True:
            seen = self.model_activity(model_id, port)
            if (seen is not None and seen.processing == 0) or time.monotonic() >= deadline:
                return seen
            time.sleep(0.2)
