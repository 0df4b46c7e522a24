"""A real PostgreSQL server for the team-store tests (DESIGN §21).

Each xdist worker starts its own cluster (initdb + pg_ctl) on a free port on
127.0.0.1, in a temporary folder, and each test gets a database of its own
(`CREATE DATABASE`, a few milliseconds) so tests never see each other's rows.
No mock of the database anywhere: the server is Debian's `postgresql`, which
`.ci/run` installs.

PostgreSQL refuses to run as root, and CI runs as root: there the cluster
belongs to `nobody` (setpriv drops to it for initdb and pg_ctl), and its
folder lives under /dev/shm (else /tmp) where `nobody` can reach it. As any other user the
cluster is the user's own.

Authentication is `trust` for connections from 127.0.0.1, as user `loopctl`:
the tests are about loopctl's behaviour, not libpq's password sources. A
test that needs a password-protected role makes one (`make_role`).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SUPERUSER = "loopctl"
START_TIMEOUT = 60  # seconds; pg_ctl -w waits for the server to accept connections


def pg_bin_dir() -> Path | None:
    """Where initdb and pg_ctl are: on PATH (a developer's machine), or
    Debian's versioned folder, newest first (apt does not put them on PATH)."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                         key=lambda p: int(Path(p).parent.name), reverse=True):
        if (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_owner() -> list[str]:
    """The command prefix that runs a server tool as the cluster's owner."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]


@dataclass
class Cluster:
    """One running server; `dsn(db)` names a database on it."""

    bin_dir: Path
    data: Path
    port: int
    log: Path
    databases: list[str] = field(default_factory=list)

    def dsn(self, database: str = "postgres", user: str = SUPERUSER) -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def _ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [*_as_owner(), str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-l",
               str(self.log), "-t", str(START_TIMEOUT), *args]
        return subprocess.run(cmd, capture_output=True, text=True, check=check,
                              env=_server_env())

    def start(self) -> None:
        # -k: the Unix socket goes in the data folder, never /var/run/postgresql
        # (absent, or another cluster's); -h: TCP on loopback only.
        self._ctl("-w", "-o", f"-p {self.port} -h 127.0.0.1 -k {self.data}", "start")

    def stop(self, mode: str = "fast") -> None:
        self._ctl("-w", "-m", mode, "stop", check=False)

    def restart(self) -> None:
        """Stop (fast: open connections are cut) and start on the same port."""
        self.stop()
        self.start()

    def sql(self, statement: str, database: str = "postgres") -> str:
        """Run one statement with psql as the superuser; its output, unaligned."""
        psql = self.bin_dir / "psql"
        cmd = [str(psql) if psql.exists() else "psql", "-X", "-q", "-A", "-t",
               "-v", "ON_ERROR_STOP=1", "-d", self.dsn(database), "-c", statement]
        done = subprocess.run(cmd, capture_output=True, text=True, env=_server_env())
        if done.returncode != 0:
            raise RuntimeError(f"psql failed: {done.stderr.strip()}")
        return done.stdout.strip()

    def new_database(self) -> str:
        name = "t_" + uuid.uuid4().hex[:16]
        self.sql(f'CREATE DATABASE "{name}"')
        self.databases.append(name)
        return name

    def make_role(self, name: str, password: str) -> None:
        self.sql(f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{password}'")


def _server_env() -> dict[str, str]:
    # Nothing of the test's libpq settings (PGPASSWORD, PGSERVICE, ...)
    # reaches the server tools; a C locale so initdb needs no locale data.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(LC_ALL="C", LANG="C")
    return env


def _cluster_parent() -> str:
    """Shared memory where there is some: a server's writes (each test's
    `CREATE DATABASE` copies a template of ~8 MB) cost a quarter of the CPU
    and a third of the wall time of a virtual disk's (10 databases: 0.3 s of
    server CPU and 1.1 s against 1.2 s and 3.6 s on /tmp, 2026-12-06)."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else "/tmp"


def start_cluster(bin_dir: Path) -> Cluster:
    folder = Path(tempfile.mkdtemp(prefix="loopctl-pg-", dir=_cluster_parent()))
    data, log = folder / "data", folder / "server.log"
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.chown(folder, nobody.pw_uid, nobody.pw_gid)
    os.chmod(folder, 0o700)
    subprocess.run([*_as_owner(), str(bin_dir / "initdb"), "-D", str(data), "-U", SUPERUSER,
                    "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"],
                   capture_output=True, text=True, check=True, env=_server_env())
    with open(data / "postgresql.conf", "a") as conf:
        # Durability is not under test; a faster server is. Short timeouts
        # keep a killed client's session from holding locks for long.
        conf.write("fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
                   "max_connections = 200\nlisten_addresses = '127.0.0.1'\n")
    cluster = Cluster(bin_dir=bin_dir, data=data, port=free_port(), log=log)
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.chown(data / "postgresql.conf", nobody.pw_uid, nobody.pw_gid)
    cluster.start()
    return cluster


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """A running PostgreSQL server for this worker; missing binaries skip the
    test, or fail it where CI requires every validator."""
    bin_dir = pg_bin_dir()
    if bin_dir is None:
        if os.environ.get("LOOPCTL_REQUIRE_VALIDATORS"):
            pytest.fail("PostgreSQL (initdb, pg_ctl) is not installed; .ci/run installs it")
        pytest.skip("PostgreSQL (initdb, pg_ctl) is not installed")
    cluster = start_cluster(bin_dir)
    try:
        yield cluster
    finally:
        cluster.stop("immediate")
        with contextlib.suppress(OSError):
            shutil.rmtree(cluster.data.parent)


@pytest.fixture
def pg_dsn(pg_cluster: Cluster) -> str:
    """A fresh, empty database on the worker's server, as a DSN with no password."""
    return pg_cluster.dsn(pg_cluster.new_database())
