"""Simulated machines for real-process tests: one Linux network namespace per host.

A fleet is a "hub" namespace holding a bridge plus one namespace per simulated
machine, each joined to the bridge by a veth pair. Addresses (IPv4 in
10.231.X.0/24, IPv6 in the ULA fd5e:9c1d:231:X::/64) live only inside those
namespaces and nothing is created in the root namespace, so traffic can only
flow between the fleet's hosts; each host also has its own loopback.

Namespace names are ``gxnf-<pid>-<n>-<host>``; ``gxnf-<pid>-<n>`` is the run
prefix. A run holds an advisory lock on ``/run/gridctl-netfleet/<prefix>.lock``
for its lifetime, so a later run can tell a crashed run's leftovers (lock free)
from a concurrently running one (lock held) and removes only the former.

Teardown always runs (exceptions, KeyboardInterrupt): every process in each
namespace is terminated, then killed, then the namespaces are deleted, which
deletes their links and the bridge with them.

    with NetFleet() as net:
        ctl = net.add_host("ctl")
        a = net.add_host("a")
        server = a.popen([sys.executable, "-m", "http.server", "8000", "--bind", a.ip])
        wait_http(ctl, a.url(8000), watch=server)
        answer = ctl.python("import socket; result = socket.gethostname()")
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

FAMILY = "gxnf"
LOCK_DIR = Path("/run/gridctl-netfleet")
PREFIX_RE = re.compile(rf"^{FAMILY}-\d+-\d+$")
NAMESPACE_RE = re.compile(rf"^({FAMILY}-\d+-\d+)-([a-z][a-z0-9]*)$")
HOST_NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,11}$")
HUB = "hub"
BRIDGE = "br0"
HOST_LINK = "eth0"
MAX_HOSTS = 200
TERM_GRACE_SECONDS = 5.0
RESULT_MARKER = "\x1enetfleet-result:"

_counter = itertools.count()
_live_prefixes: set[str] = set()

# Runs inside a namespace: reads {"source", "args"} from stdin, executes the
# source with ARGS bound, and prints the JSON of its `result` after a marker,
# so the snippet may print freely and secrets never appear in argv.
_PYTHON_DRIVER = f"""
import json, sys
request = json.loads(sys.stdin.read())
scope = {{"ARGS": request["args"], "__name__": "__netfleet__"}}
exec(compile(request["source"], request["label"], "exec"), scope)
sys.stdout.write("\\n" + {RESULT_MARKER!r} + json.dumps(scope.get("result")) + "\\n")
"""

# Polls one URL from inside a namespace until it answers with the wanted status.
_HTTP_PROBE = """
import ssl, time
import httpx
verify = ARGS["verify"]
if isinstance(verify, str):
    verify = ssl.create_default_context(cafile=verify)
end = time.monotonic() + ARGS["deadline"]
last = "no attempt"
result = None
while time.monotonic() < end:
    pid = ARGS["watch_pid"]
    if pid is not None:
        try:  # a zombie (exited, not yet reaped by its parent) counts as gone
            gone = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
        except FileNotFoundError:
            gone = True
        if gone:
            result = {"ok": False, "why": f"process {pid} exited before answering ({last})"}
            break
    try:
        response = httpx.get(ARGS["url"], verify=verify, timeout=2.0)
        if response.status_code == ARGS["status"]:
            result = {"ok": True, "status": response.status_code, "text": response.text}
            break
        last = f"HTTP {response.status_code}: {response.text[:200]}"
    except httpx.HTTPError as exc:
        last = f"{type(exc).__name__}: {exc}"
    time.sleep(ARGS["interval"])
if result is None:
    result = {"ok": False, "why": f"timed out after {ARGS['deadline']:.0f}s ({last})"}
"""


class NetFleetError(RuntimeError):
    """A namespace operation or a command run inside a namespace failed."""


class NetFleetUnavailable(NetFleetError):
    """This machine cannot host namespaces: not root, or no `ip` (iproute2)."""


def ip_binary() -> str:
    path = shutil.which("ip") or next(
        (p for p in ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip") if os.access(p, os.X_OK)), None
    )
    if path is None:
        raise NetFleetUnavailable(
            "network-namespace tests need the `ip` command from iproute2 "
            "(apt-get install -y iproute2)"
        )
    return path


def require_netns() -> None:
    """Raise NetFleetUnavailable with a clear reason unless namespaces can be made here."""
    if os.geteuid() != 0:
        raise NetFleetUnavailable(
            f"network-namespace tests must run as root (euid is {os.geteuid()}); "
            "CI runs them as root"
        )
    ip_binary()


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [ip_binary(), *args], capture_output=True, text=True, timeout=30, check=False
    )
    if check and done.returncode != 0:
        raise NetFleetError(
            f"ip {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}"
        )
    return done


def list_namespaces() -> list[str]:
    """Every network namespace name `ip netns list` shows."""
    out = _ip("netns", "list").stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def family_namespaces() -> list[str]:
    """The namespaces that belong to some run of this module (live or stale)."""
    return [name for name in list_namespaces() if NAMESPACE_RE.match(name)]


def namespace_pids(namespace: str) -> list[int]:
    done = _ip("netns", "pids", namespace, check=False)
    return [int(word) for word in done.stdout.split() if word.isdigit()]


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _running(pid: int) -> bool:
    """True while `pid` exists and is not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def kill_namespace_processes(namespaces: Sequence[str], grace: float = TERM_GRACE_SECONDS) -> None:
    """SIGTERM everything in `namespaces`, SIGKILL what is left after `grace` seconds."""
    pids = [pid for namespace in namespaces for pid in namespace_pids(namespace)]
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    end = time.monotonic() + grace
    while time.monotonic() < end and any(_running(pid) for pid in pids):
        time.sleep(0.02)
    for _ in range(50):  # children forked during the grace period are killed too
        left = [
            pid for namespace in namespaces for pid in namespace_pids(namespace) if _running(pid)
        ]
        if not left:
            return
        for pid in left:
            _signal(pid, signal.SIGKILL)
        time.sleep(0.02)
    raise NetFleetError(f"processes {left} in {', '.join(namespaces)} survived SIGKILL")


def _lock_path(prefix: str) -> Path:
    return LOCK_DIR / f"{prefix}.lock"


def _try_lock(prefix: str) -> int | None:
    """An fd holding the run's exclusive lock, or None if a live run holds it."""
    LOCK_DIR.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(_lock_path(prefix), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def sweep_stale() -> list[str]:
    """Delete namespaces left by runs that died (their lock is free); return their names.

    Namespaces of runs still alive, in this process or any other, are left alone.
    """
    by_prefix: dict[str, list[str]] = {}
    for name in family_namespaces():
        match = NAMESPACE_RE.match(name)
        assert match is not None
        by_prefix.setdefault(match.group(1), []).append(name)
    removed: list[str] = []
    for prefix, names in sorted(by_prefix.items()):
        if prefix in _live_prefixes:
            continue
        fd = _try_lock(prefix)
        if fd is None:
            continue
        try:
            kill_namespace_processes(names)
            for name in names:
                _ip("netns", "del", name, check=False)
            removed.extend(names)
            _lock_path(prefix).unlink(missing_ok=True)
        finally:
            os.close(fd)
    return removed


def new_prefix() -> str:
    return f"{FAMILY}-{os.getpid()}-{next(_counter)}"


def _bracketed(address: str) -> str:
    return f"[{address}]" if ":" in address else address


@dataclass
class Host:
    """One simulated machine: a namespace with an address on the fleet bridge."""

    name: str
    namespace: str
    ip: str
    ip6: str
    processes: list[subprocess.Popen[Any]] = field(default_factory=list, repr=False)

    def command(self, argv: Sequence[str | os.PathLike[str]]) -> list[str]:
        """`argv` prefixed so it runs inside this host's namespace."""
        return [ip_binary(), "netns", "exec", self.namespace, *map(os.fspath, argv)]

    def popen(self, argv: Sequence[str | os.PathLike[str]], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start `argv` in this host's namespace; teardown kills it if still running."""
        process: subprocess.Popen[Any] = subprocess.Popen(self.command(argv), **kwargs)
        self.processes.append(process)
        return process

    def run(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        timeout: float = 60.0,
        **kwargs: Any,
    ) -> subprocess.CompletedProcess[Any]:
        """Run `argv` to completion in this namespace (output captured as text by default)."""
        if "stdout" not in kwargs and "stderr" not in kwargs:
            kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.command(argv), timeout=timeout, check=False, **kwargs)

    def python(
        self,
        source: str,
        args: Any = None,
        *,
        timeout: float = 60.0,
        env: dict[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> Any:
        """Run Python `source` in this namespace and return the JSON value of its `result`.

        `args` (any JSON value) is bound to `ARGS` and travels on stdin, never argv.
        A non-zero exit raises NetFleetError carrying the child's stderr.
        """
        request = json.dumps({"source": source, "args": args, "label": f"<netfleet:{self.name}>"})
        done = self.run(
            [sys.executable, "-c", _PYTHON_DRIVER],
            input=request,
            timeout=timeout,
            env=env,
            cwd=cwd,
        )
        if done.returncode != 0 or RESULT_MARKER not in done.stdout:
            raise NetFleetError(
                f"python in {self.name} exited {done.returncode}: {done.stderr.strip()[-2000:]}"
            )
        return json.loads(done.stdout.rsplit(RESULT_MARKER, 1)[1])

    def url(self, port: int, *, scheme: str = "http", ipv6: bool = False, path: str = "") -> str:
        return f"{scheme}://{_bracketed(self.ip6 if ipv6 else self.ip)}:{port}{path}"

    def pids(self) -> list[int]:
        return namespace_pids(self.namespace)


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    text: str


def wait_http(
    host: Host,
    url: str,
    *,
    deadline: float = 60.0,
    status: int = 200,
    verify: bool | str = True,
    watch: subprocess.Popen[Any] | None = None,
    interval: float = 0.1,
) -> HttpAnswer:
    """Poll `url` from inside `host`'s namespace until it answers `status`.

    `verify` is httpx's (True, False, or a CA file path). With `watch`, stop early
    when that process exits. Raises AssertionError naming the URL and the last error.
    """
    outcome = host.python(
        _HTTP_PROBE,
        {
            "url": url,
            "deadline": deadline,
            "status": status,
            "verify": verify,
            "interval": interval,
            "watch_pid": watch.pid if watch is not None else None,
        },
        timeout=deadline + 30.0,
    )
    if not outcome["ok"]:
        raise AssertionError(f"{url} from {host.name}: {outcome['why']}")
    return HttpAnswer(status=outcome["status"], text=outcome["text"])


class NetFleet:
    """A bridge in a hub namespace and one namespace per simulated host."""

    def __init__(self, prefix: str | None = None, *, subnet: int | None = None) -> None:
        self.prefix = prefix or new_prefix()
        if not PREFIX_RE.match(self.prefix):
            raise ValueError(f"netfleet prefix {self.prefix!r} must look like {FAMILY}-<pid>-<n>")
        numbers = [int(part) for part in self.prefix.split("-")[1:]]
        self.subnet = subnet if subnet is not None else (numbers[0] * 7 + numbers[1]) % 250 + 1
        if not 1 <= self.subnet <= 254:
            raise ValueError(f"netfleet subnet {self.subnet} must be within 1..254")
        self.hub = f"{self.prefix}-{HUB}"
        self.hosts: dict[str, Host] = {}
        self._namespaces: list[str] = []
        self._lock_fd: int | None = None

    @property
    def ipv4_network(self) -> str:
        return f"10.231.{self.subnet}.0/24"

    @property
    def ipv6_network(self) -> str:
        return f"fd5e:9c1d:231:{self.subnet:x}::/64"

    def __enter__(self) -> NetFleet:
        require_netns()
        sweep_stale()
        self._lock_fd = _try_lock(self.prefix)
        if self._lock_fd is None:
            raise NetFleetError(f"netfleet prefix {self.prefix} is held by another live run")
        _live_prefixes.add(self.prefix)
        try:
            self._add_namespace(self.hub)
            _ip("-n", self.hub, "link", "add", BRIDGE, "type", "bridge", "mcast_snooping", "0")
            _ip("-n", self.hub, "link", "set", BRIDGE, "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _add_namespace(self, namespace: str) -> None:
        self._namespaces.append(namespace)  # recorded first: a half-made one is still deleted
        _ip("netns", "add", namespace)
        _ip("-n", namespace, "link", "set", "lo", "up")

    def add_host(self, name: str) -> Host:
        """A new machine on the bridge, with `lo` up and one IPv4 and one IPv6 address."""
        if self._lock_fd is None:
            raise NetFleetError("add_host needs an open fleet: use `with NetFleet() as net`")
        if not HOST_NAME_RE.match(name) or name == HUB:
            raise ValueError(
                f"host name {name!r} must be 1-12 lowercase letters/digits starting with a "
                f"letter, and not {HUB!r}"
            )
        if name in self.hosts:
            raise ValueError(f"host {name!r} already exists in this fleet")
        if len(self.hosts) >= MAX_HOSTS:
            raise ValueError(f"a fleet holds at most {MAX_HOSTS} hosts")
        number = len(self.hosts) + 2
        namespace = f"{self.prefix}-{name}"
        host = Host(
            name=name,
            namespace=namespace,
            ip=f"10.231.{self.subnet}.{number}",
            ip6=f"fd5e:9c1d:231:{self.subnet:x}::{number:x}",
        )
        self.hosts[name] = host
        self._add_namespace(namespace)
        port = f"v-{name}"
        peer = ("peer", "name", HOST_LINK, "netns", namespace)  # created inside the host
        _ip("-n", self.hub, "link", "add", port, "type", "veth", *peer)
        _ip("-n", self.hub, "link", "set", port, "master", BRIDGE, "up")
        _ip("-n", namespace, "addr", "add", f"{host.ip}/24", "dev", HOST_LINK)
        _ip("-n", namespace, "addr", "add", f"{host.ip6}/64", "dev", HOST_LINK, "nodad")
        _ip("-n", namespace, "link", "set", HOST_LINK, "up")
        return host

    def close(self) -> None:
        """Kill every process of the fleet and delete its namespaces; safe to call twice."""
        try:
            kill_namespace_processes(self._namespaces)
        finally:
            for process in self.all_processes():
                _reap(process)
            for namespace in reversed(self._namespaces):
                _ip("netns", "del", namespace, check=False)
            left = sorted(set(self._namespaces) & set(list_namespaces()))
            self._namespaces = left
            if self._lock_fd is not None and not left:
                _lock_path(self.prefix).unlink(missing_ok=True)
                os.close(self._lock_fd)
                self._lock_fd = None
                _live_prefixes.discard(self.prefix)
        if left:
            raise NetFleetError(f"namespaces {left} could not be deleted")

    def namespaces(self) -> list[str]:
        return list(self._namespaces)

    def all_processes(self) -> Iterator[subprocess.Popen[Any]]:
        for host in self.hosts.values():
            yield from host.processes


def _reap(process: subprocess.Popen[Any]) -> None:
    """Kill a started process that raced out of its namespace, then collect it."""
    if process.poll() is None:
        process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=TERM_GRACE_SECONDS)
    for stream in (process.stdin, process.stdout, process.stderr):
        _close(stream)


def _close(stream: IO[Any] | None) -> None:
    if stream is not None:
        with contextlib.suppress(OSError):
            stream.close()
