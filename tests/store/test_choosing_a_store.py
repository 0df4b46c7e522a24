"""Choosing the team store (DESIGN §21): `store:` in loops.yaml or
LOOPCTL_STORE, checked as text before anything connects; bad input is one
line, exit 3, with the way out, and nothing is written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CLI

LOOPS = "version: 1\nstore: {dsn}\nloops: {{}}\n"


def write_loops(home: Path, dsn: str) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    path = home / "loops.yaml"
    path.write_text(LOOPS.format(dsn=dsn))
    return path


def files_under(home: Path) -> dict[str, bytes]:
    return {str(p.relative_to(home)): p.read_bytes() for p in home.rglob("*") if p.is_file()}


@pytest.mark.parametrize("dsn", ["postgresql://u:secret@db.example/loops",
                                 "postgresql://u@db.example/loops?password=secret",
                                 "postgres://u@db.example/loops?sslmode=require&PASSWORD=x"])
@pytest.mark.parametrize("command", [("ls",), ("tick",), ("status",), ("store", "status")])
def test_a_password_in_loops_yaml_is_refused_with_the_way_out(cli: CLI, home: Path, dsn: str,
                                                               command: tuple[str, ...]) -> None:
    path = write_loops(home, dsn)
    before = files_under(home)
    proc = cli(*command)
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert f"{path}, line 2: store holds a password" in lines[0]
    assert "PGPASSWORD" in lines[0] and "~/.pgpass" in lines[0] and "service file" in lines[0]
    assert "secret" not in proc.stderr + proc.stdout
    assert files_under(home) == before  # nothing written, loops.yaml as it was


@pytest.mark.parametrize("dsn", ["mysql://u@db.example/loops", "db.example:5432",
                                 "'host=db.example dbname=loops'", "postgresql://u@h:99999/db"])
def test_a_dsn_that_is_not_postgresqls_is_refused(cli: CLI, home: Path, dsn: str) -> None:
    write_loops(home, dsn)
    before = files_under(home)
    proc = cli("ls")
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert "expected postgresql://USER@HOST[:PORT]/DB" in proc.stderr
    assert files_under(home) == before


def test_the_environment_wins_and_may_carry_the_password(cli: CLI, home: Path) -> None:
    """LOOPCTL_STORE (a secret store's) wins over loops.yaml; a password
    there is libpq's business, and it is never shown."""
    write_loops(home, "postgresql://u@127.0.0.1:1/fromfile")
    proc = cli("store", "status", "--json",
               env={"LOOPCTL_STORE": "postgresql://env:hunter2@127.0.0.1:1/fromenv"})
    assert proc.returncode == 3
    assert "fromenv" in proc.stdout and "fromfile" not in proc.stdout
    assert "hunter2" not in proc.stdout + proc.stderr and "***" in proc.stdout


def test_a_bad_dsn_in_the_environment_is_refused(cli: CLI, home: Path) -> None:
    proc = cli("ls", env={"LOOPCTL_STORE": "sqlite:///x.db"})
    assert proc.returncode == 3
    assert proc.stderr.startswith("loopctl: error: LOOPCTL_STORE: store 'sqlite:///x.db' is "
                                  "not a PostgreSQL URL")


def test_without_psycopg_one_line_says_how_to_install_it(home: Path, tmp_path: Path) -> None:
    """psycopg is imported only when a store is set, and when it is missing
    the line names the extra. A shadowing `psycopg` that fails to import
    plays the missing package."""
    shadow = tmp_path / "shadow"
    (shadow / "psycopg").mkdir(parents=True)
    (shadow / "psycopg" / "__init__.py").write_text("raise ImportError('not here')\n")
    write_loops(home, "postgresql://u@127.0.0.1:1/db")
    env = dict(os.environ, PYTHONPATH=str(shadow))
    proc = subprocess.run([sys.executable, "-m", "loopctl", "ls"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert proc.returncode == 3
    assert proc.stderr.strip() == ("loopctl: error: a store is set but psycopg is not "
                                   "installed: pip install 'loopctl[postgres]'")


def test_a_home_of_files_never_imports_psycopg(cli: CLI, home: Path, tmp_path: Path) -> None:
    """Nor the store's modules, even when the word `store` is in loops.yaml
    (a folder's name): the gate's glance at the bytes is only a first look."""
    from conftest import imported_modules

    folder = tmp_path / "store-of-things"
    folder.mkdir()
    cli("start", "--name", "disk", "--every", "10m", "--cwd", str(folder), "true", check=0)
    assert b"store" in (home / "loops.yaml").read_bytes()
    cli("run", "disk", check=0)  # a record and a log: nothing owed to any team
    assert not (home / "state" / "team-outbox").exists()
    for args in (("ls",), ("status", "disk"), ("history", "disk"),
                 ("history", "disk", "--skipped"), ("logs", "disk"), ("tick",),
                 ("pause", "disk"), ("ls", "--json"), ("digest",), ("digest", "--json")):
        loaded = imported_modules(*args)
        assert not [m for m in loaded if m.startswith(
            ("psycopg", "loopctl.storage.pg.team", "loopctl.commands.team_runs",
             "loopctl.commands.team_view", "loopctl.storage.pg.runs",
             "loopctl.storage.pg.state", "loopctl.storage.pg.schema"))], args


def test_a_machine_name_that_cannot_be_shown_is_refused(cli: CLI, home: Path) -> None:
    write_loops(home, "postgresql://u@127.0.0.1:1/db")
    proc = cli("store", "status", env={"LOOPCTL_MACHINE": "m1\x1b[31m"})
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == ("loopctl: error: LOOPCTL_MACHINE: 'm1\\x1b[31m' is not a "
                                   "machine name; expected at most 100 printable characters, "
                                   "like runner-1")


@pytest.mark.parametrize("dsn", ["postgresql://u@db.example/loops\nEVIL=1",
                                 "postgresql://u@db\r.example/loops", "postgresql://u@h/\x1b[2J"])
@pytest.mark.parametrize("command", [("ls",), ("export", "x", "--to", "systemd")])
def test_a_dsn_with_a_control_character_is_refused(cli: CLI, home: Path, dsn: str,
                                                   command: tuple[str, ...]) -> None:
    """A newline would start a line of its own in the systemd environment
    file an export writes the DSN to."""
    cli("start", "p", "--name", "x", "--every", "1h", "--command", "true", check=0)
    before = files_under(home)
    proc = cli(*command, env={"LOOPCTL_STORE": dsn})
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "holds a control character" in lines[0], proc.stderr
    assert files_under(home) == before


def test_a_huge_dsn_is_refused_in_one_short_line(cli: CLI, home: Path) -> None:
    proc = cli("ls", env={"LOOPCTL_STORE": "mysql://" + "x" * 1_000_000})
    assert proc.returncode == 3
    (line,) = proc.stderr.strip().splitlines()
    assert "is not a PostgreSQL URL" in line and len(line) < 400, len(line)


@pytest.mark.parametrize("where", ["env", "file"])
def test_a_huge_postgresql_dsn_is_refused_in_one_short_line(cli: CLI, home: Path,
                                                            where: str) -> None:
    """A URL past 4,096 characters is no connection anyone meant, and would be
    quoted whole in every "unreachable" line a daemon says."""
    dsn = "postgresql://u@" + "h" * 1_000_000 + "/db"
    if where == "env":
        proc = cli("ls", env={"LOOPCTL_STORE": dsn})
    else:
        write_loops(home, dsn)
        proc = cli("ls")
    assert proc.returncode == 3, proc.stderr[-300:]
    (line,) = proc.stderr.strip().splitlines()
    assert "more than 4096" in line and len(line) < 400, line[:400]


def test_a_loops_yaml_past_the_bound_is_refused_without_being_read_whole(
        cli: CLI, home: Path) -> None:
    """The store's glance at loops.yaml reads no more than the definitions
    would: a file past the bound is theirs to refuse (exit 3, one line)."""
    from loopctl.storage.definitions import MAX_DEFS_BYTES
    from loopctl.storage.pg import gate

    assert gate.MAX_DEFS_BYTES == MAX_DEFS_BYTES
    home.mkdir(parents=True, exist_ok=True)
    path = home / "loops.yaml"
    with open(path, "wb") as handle:  # sparse: 64 GiB of nothing, no word `store`
        handle.truncate(64 * 2**30)
    assert gate.may_have_store(str(path))
    proc = cli("ls")
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    (line,) = proc.stderr.strip().splitlines()
    assert "larger than 8 MiB" in line


@pytest.mark.parametrize("param", ["passfile=/etc/shadow", "service=prod", "requirepeer=root",
                                   "options=-c%20default_transaction_read_only%3Don",
                                   "PassFile=/x"])
def test_a_libpq_parameter_that_picks_secrets_is_refused_in_loops_yaml(
        cli: CLI, home: Path, param: str) -> None:
    """loops.yaml travels: it may say where and how to connect, not which
    local secret to send or which server settings every session gets."""
    write_loops(home, f"postgresql://u@db.example/loops?sslmode=require&{param}")
    before = files_under(home)
    proc = cli("ls")
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert f"store parameter {param.partition('=')[0]!r} is not allowed in loops.yaml" in lines[0]
    assert files_under(home) == before


def test_where_and_how_to_connect_are_allowed_in_loops_yaml() -> None:
    from loopctl.storage.pg.dsn import check_dsn

    dsn = ("postgresql://u@db.example:5433/loops?sslmode=verify-full&sslrootcert=/etc/ca.pem"
           "&connect_timeout=5&application_name=loopctl&target_session_attrs=read-write")
    assert check_dsn(dsn, "loops.yaml", in_file=True) == dsn
    # The environment is the machine owner's: any parameter.
    env = "postgresql://u@db.example/loops?passfile=/home/u/.pgpass&options=-c%20x%3Dy"
    assert check_dsn(env, "LOOPCTL_STORE", in_file=False) == env
