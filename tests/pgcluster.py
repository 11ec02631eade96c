"""A throwaway PostgreSQL cluster for tests: initdb in a temporary directory, pg_ctl start.

The server refuses to run as root, so under root the cluster belongs to an
unprivileged system user (``gridctl-pg``, created when missing) and every
server command runs through ``runuser``. It listens on 127.0.0.1 only, with
password authentication for the ``gridctl`` role; tests connect with a
password file, exactly as an operator would. Each test gets a fresh database.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PG_USER = "gridctl-pg"
ROLE = "gridctl"


def find_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for root in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (root / name).exists():
            return str(root / name)
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ensure_user() -> None:
    try:
        pwd.getpwnam(PG_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PG_USER],
            check=True,
            capture_output=True,
        )


@dataclass
class PgCluster:
    root: Path
    port: int
    password_file: Path
    databases: list[str] = field(default_factory=list)

    def _as_owner(self, argv: list[str]) -> list[str]:
        return ["runuser", "-u", PG_USER, "--", *argv] if os.geteuid() == 0 else argv

    def _run(self, argv: list[str]) -> str:
        done = subprocess.run(self._as_owner(argv), capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {done.stdout}{done.stderr}")
        return done.stdout

    @property
    def data(self) -> Path:
        return self.root / "data"

    def start(self) -> None:
        pg_ctl = find_bin("pg_ctl")
        assert pg_ctl
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} "
            "-c fsync=off -c full_page_writes=off"  # throwaway: crash safety is not under test
        )
        self._run(
            [
                pg_ctl,
                "-D",
                str(self.data),
                "-l",
                str(self.root / "log"),
                "-w",
                "-t",
                "60",
                "-o",
                options,
                "start",
            ]
        )

    def stop(self) -> None:
        pg_ctl = find_bin("pg_ctl")
        assert pg_ctl
        self._run([pg_ctl, "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop"])

    def url(self, database: str) -> str:
        return f"postgresql://{ROLE}@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        psql = find_bin("psql")
        assert psql
        name = f"t_{secrets.token_hex(6)}"
        env = {**os.environ, "PGPASSWORD": self.password_file.read_text().strip()}
        subprocess.run(
            [
                psql,
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                ROLE,
                "-d",
                "postgres",
                "-v",
                "ON_ERROR_STOP=1",
                "-qc",
                f"CREATE DATABASE {name}",
            ],
            check=True,
            capture_output=True,
            env=env,
            timeout=60,
        )
        self.databases.append(name)
        return self.url(name)


def create_cluster() -> PgCluster:
    initdb = find_bin("initdb")
    if initdb is None:
        pytest.fail("PostgreSQL's initdb is not installed (Debian: apt-get install postgresql)")
    if os.geteuid() == 0:
        _ensure_user()
    root = Path(tempfile.mkdtemp(prefix="gridctl-pg-"))
    password_file = root / "password"
    password_file.write_text(secrets.token_hex(16) + "\n")
    if os.geteuid() == 0:
        entry = pwd.getpwnam(PG_USER)
        os.chown(root, entry.pw_uid, entry.pw_gid)
        os.chown(password_file, entry.pw_uid, entry.pw_gid)
    root.chmod(0o711)
    password_file.chmod(0o644)  # the test process reads it too (it may not be the owner)
    cluster = PgCluster(root, _free_port(), password_file)
    cluster._run(
        [
            initdb,
            "-D",
            str(cluster.data),
            "-U",
            ROLE,
            "--auth=scram-sha-256",
            f"--pwfile={password_file}",
            "-E",
            "UTF8",
            "--no-instructions",
        ]
    )
    cluster.start()
    return cluster


def destroy_cluster(cluster: PgCluster) -> None:
    try:
        cluster.stop()
    finally:
        shutil.rmtree(cluster.root, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    cluster = create_cluster()
    try:
        yield cluster
    finally:
        destroy_cluster(cluster)
