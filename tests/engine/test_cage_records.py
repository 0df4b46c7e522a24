"""A hostile agent plants something in the folders its run may write, and
the next run's cage must not be built from it (DESIGN §14: the cage is
built from loopctl's records): a `.git` link naming `/` or the home, a
prompt file turned into a link to a key, a FIFO where loopctl would read,
a preset or --sandbox-write folder turned into a link to the home.

Each agent is a small shell script (real processes: `loopctl run`, `tick`,
the supervisors it forks), confined with `--sandbox on` (or `auto` for a
preset). Root does not matter: Landlock denies root too.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from pathlib import Path

import pytest

from conftest import CLI, wait_for

SECRET = "SECRET-KEY-MATERIAL"


def key(home: Path) -> Path:
    path = home / ".ssh" / "id_rsa"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SECRET + "\n")
    return path


def agent(tmp_path: Path, plant: str, then: str) -> Path:
    """A two-stage agent: its first run plants, every later run tries."""
    script = tmp_path / "agent.sh"
    script.write_text(f"if [ -e planted ]; then\n{then}\nexit 0\nfi\n{plant}\ntouch planted\n")
    return script


def log_of(cli: CLI, name: str, record: dict[str, object]) -> str:
    return (cli.state_dir / "runs" / name / f"{record['run_id']}.log").read_text(errors="replace")


def last(cli: CLI, name: str) -> dict[str, object]:
    return sorted(cli.records(name), key=lambda r: str(r["started_at"]))[-1]


@pytest.mark.parametrize("plant", [
    "printf 'gitdir: /\\n' > .git",
    "mkdir g && printf 'gitdir: g\\n' > .git && printf '%s\\n' \"$HOME\" > g/commondir",
], ids=["gitdir-root", "commondir-home"])
def test_a_git_link_never_widens_the_next_run(cli: CLI, tmp_path: Path, plant: str) -> None:
    """The next run reads what loopctl recorded at `start` (no repository
    here), never the agent's `.git`: the key stays unreadable."""
    secret = key(Path(os.environ["HOME"]))
    work = tmp_path / "work"
    work.mkdir()
    script = agent(tmp_path, plant, f"cat {shlex.quote(str(secret))} > got; echo $? > got.rc")
    cli("start", "p", "--name", "x", "--every", "1h", "--after", "1h", "--cwd", str(work),
        "--command", f"sh {script}", "--sandbox", "on", check=0)
    assert cli.state()["loops"]["x"]["repository"] == []
    cli("run", "x", check=0)
    assert (work / ".git").is_file()
    cli("run", "x")
    assert (work / "got.rc").read_text().strip() != "0"
    assert SECRET not in (work / "got").read_text()
    record = last(cli, "x")
    assert record["outcome"] == "ok" and SECRET not in log_of(cli, "x", record)


def test_a_check_in_a_worktree_reads_no_more_than_the_worktree(cli: CLI,
                                                              tmp_path: Path) -> None:
    """`--check` runs the tree's own code after the agent: its cage is built
    from loopctl's record of the worktree, not the `.git` the agent wrote."""
    secret = key(Path(os.environ["HOME"]))
    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "0"]):
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c",
                        "user.email=t@t", *args], check=True)
    planter = tmp_path / "plant.sh"
    planter.write_text("rm -f .git && printf 'gitdir: /\\n' > .git\n")
    check = tmp_path / "check.sh"
    check.write_text(f"cat {shlex.quote(str(secret))}; exit 0\n")
    cli("start", "p", "--name", "wt", "--every", "1h", "--after", "1h", "--cwd", str(repo),
        "--worktree", "--command", f"sh {planter}", "--check", f"sh {check}",
        "--sandbox", "on", check=0)
    cli("run", "wt")
    record = last(cli, "wt")
    log = log_of(cli, "wt", record)
    assert "# loopctl: check" in log and "Permission denied" in log
    assert SECRET not in log and SECRET not in str(record)


def test_a_prompt_file_turned_into_a_link_fails_the_run(cli: CLI, tmp_path: Path) -> None:
    """The agent is given loopctl's copy of the prompt; when it replaces the
    loop's prompt file with a link to a key, the next run fails naming the
    file, and the key reaches neither the prompt, the log nor the record."""
    secret = key(Path(os.environ["HOME"]))
    work = tmp_path / "work"
    work.mkdir()
    prompt = work / "LOOP.md"
    prompt.write_text("tidy up\n")
    script = agent(tmp_path, f'echo "$1" > given; rm LOOP.md; ln -s {shlex.quote(str(secret))}'
                   " LOOP.md", 'cat "$1"')
    cli("start", "--prompt-file", str(prompt), "--name", "pf", "--every", "1h", "--after",
        "1h", "--cwd", str(work), "--command", f"sh {script} {{prompt_file}}",
        "--sandbox", "on", check=0)
    cli("run", "pf", check=0)
    given = (work / "given").read_text().strip()
    assert given != str(prompt) and Path(given).is_relative_to(cli.state_dir)
    proc = cli("run", "pf")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    record = last(cli, "pf")
    assert record["outcome"] == "failed"
    assert record["note"] == f"prompt file refused: {prompt}: a symbolic link"
    assert SECRET not in log_of(cli, "pf", record) and SECRET not in str(record)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["commondir", "prompt"])
def test_a_fifo_wedges_no_other_loop(cli: CLI, tmp_path: Path, where: str) -> None:
    """A FIFO where loopctl would read (a `commondir` behind a `.git` link,
    the prompt file): `tick` returns, the other loop fires, `stop --kill`
    answers; the planted prompt FIFO fails that loop's run only."""
    work = tmp_path / "work"
    work.mkdir()
    prompt = work / "LOOP.md"
    prompt.write_text("go\n")
    plants = {"commondir": "mkdir g && printf 'gitdir: g\\n' > .git && mkfifo g/commondir",
              "prompt": "rm LOOP.md && mkfifo LOOP.md"}
    fifo = work / ("g/commondir" if where == "commondir" else "LOOP.md")
    script = agent(tmp_path, plants[where], "echo second")
    cli("start", "--prompt-file", str(prompt), "--name", "a", "--every", "1h", "--after",
        "1h", "--cwd", str(work), "--command", f"sh {script}", "--sandbox", "on", check=0)
    other = tmp_path / "other"
    other.mkdir()
    cli("start", "echo fired", "--name", "b", "--every", "1h", "--after", "1h",
        "--cwd", str(other), check=0)
    cli("run", "a", check=0)
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    try:
        for name in ("a", "b"):
            cli("trigger", name, check=0)
        cli("tick", timeout=30)
        wait_for(lambda: len(cli.records("b")) == 1 and len(cli.records("a")) == 2)
        assert cli.records("b")[0]["outcome"] == "ok"
        assert cli("stop", "a", "--kill", timeout=30).returncode == 0
    finally:  # without the fix: let a supervisor stuck in open() go
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
    record = last(cli, "a")
    if where == "prompt":
        assert record["outcome"] == "failed"
        assert record["note"] == f"prompt file refused: {prompt}: a FIFO, not a regular file"
    else:
        assert record["outcome"] == "ok"


def test_a_preset_folder_turned_into_a_link_fails_the_run(cli: CLI, tmp_path: Path) -> None:
    """opencode may write ~/.cache, so it can swap its ~/.cache/opencode
    for a link to the home: the next run (auto) fails, saying so, and the
    home's ~/.bashrc stays as it was."""
    home = Path(os.environ["HOME"])
    bashrc = home / ".bashrc"
    bashrc.write_text("# mine\n")
    tools = tmp_path / "tools"
    tools.mkdir()
    cache = home / ".cache" / "opencode"
    script = agent(tmp_path, f"rm -rf {cache} && ln -s {home} {cache}",
                   f"echo owned >> {bashrc}")
    fake = tools / "opencode"  # on PATH: readable to the run, as its program
    fake.write_text("#!/bin/sh\n" + script.read_text())
    fake.chmod(0o755)
    env = {"PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}
    work = tmp_path / "work"
    work.mkdir()
    cli("start", "p", "--name", "oc", "--agent", "opencode", "--every", "1h", "--after", "1h",
        "--cwd", str(work), env=env, check=0)
    first = cli("run", "oc", env=env)
    assert cache.is_symlink(), first.stdout + first.stderr
    proc = cli("run", "oc", env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    record = last(cli, "oc")
    assert record["outcome"] == "failed"
    assert record["note"] == f"sandbox refused {cache}: a symbolic link, not a real folder"
    assert f"sandbox refused {cache}" in log_of(cli, "oc", record)
    assert bashrc.read_text() == "# mine\n"


def test_a_sandbox_write_folder_turned_into_a_link_fails_the_run(cli: CLI,
                                                                 tmp_path: Path) -> None:
    """A --sandbox-write folder inside a folder the run may write (here
    ~/.cache) swapped for a link to the home widens nothing; the log of a
    run that was granted it names what it was granted."""
    home = Path(os.environ["HOME"])
    bashrc = home / ".bashrc"
    bashrc.write_text("# mine\n")
    state = home / ".cache" / "tool"
    state.mkdir(parents=True)
    work = tmp_path / "work"
    work.mkdir()
    script = agent(tmp_path, f"rm -rf {state} && ln -s {home} {state}",
                   f"echo owned >> {bashrc}")
    cli("start", "p", "--name", "sw", "--every", "1h", "--after", "1h", "--cwd", str(work),
        "--command", f"sh {script}", "--sandbox", "on", "--sandbox-write", str(state),
        check=0)
    cli("run", "sw", check=0)
    assert str(state) in log_of(cli, "sw", last(cli, "sw")).split("writable: ", 1)[1]
    assert state.is_symlink()
    assert cli("run", "sw").returncode == 1
    record = last(cli, "sw")
    assert record["outcome"] == "failed"
    assert record["note"] == f"sandbox refused {state}: a symbolic link, not a real folder or file"
    assert bashrc.read_text() == "# mine\n"
    doctor = json.loads(cli("doctor", "--json").stdout)
    assert {"level": "error", "check": "sandbox", "message": f"loop 'sw': its runs fail: "
            f"sandbox refused {state}: a symbolic link, not a real folder or file"} \
        in doctor["findings"]


def test_a_hand_written_loop_records_its_repository_at_its_first_run(
        cli: CLI, home: Path, tmp_path: Path) -> None:
    """No `start` looked it up: its first confined run does, and records it;
    the next run reads the record, not a `.git` the agent wrote since."""
    repo = tmp_path / "repo"
    work = repo / "sub"
    work.mkdir(parents=True)
    subprocess.run(["git", "-C", str(repo), "init", "-q"], check=True)
    script = agent(tmp_path, "printf 'gitdir: /\\n' > .git", "git rev-parse --show-toplevel")
    home.mkdir(mode=0o700, exist_ok=True)
    (home / "loops.yaml").write_text(
        "version: 1\nloops:\n  hand:\n    prompt: p\n    every: 1h\n    after: 1h\n"
        f"    cwd: {work}\n    sandbox: 'on'\n    command: [sh, {script}]\n")
    cli("run", "hand", check=0)
    assert cli.state()["loops"]["hand"]["repository"] == [str(repo)]
    cli("run", "hand")
    record = last(cli, "hand")
    assert record["outcome"] == "ok" and record["sandbox"].startswith("landlock")
    assert "; readable too: " + str(repo) in log_of(cli, "hand", record)


@pytest.mark.parametrize("where", ["script", "path-entry"])
def test_a_link_planted_where_a_program_is_found_grants_nothing(
        cli: CLI, tmp_path: Path, where: str) -> None:
    """The program a `--command` names, or a PATH entry, inside a folder the
    run may write: the agent turns it into a link to the key (or ~/.ssh);
    the next run is not granted what the link points at."""
    home = Path(os.environ["HOME"])
    secret = key(home)
    work = tmp_path / "work"
    work.mkdir()
    entry = home / ".cache" / "tools" / "bin"
    entry.mkdir(parents=True)
    if where == "script":
        script = work / "agent.sh"  # the agent's own folder: it may rewrite it
        script.write_text(f'rm "$0"; ln -s {secret} "$0"\n')
        command = f"sh {script}"
    else:
        command = "sh " + str(agent(tmp_path, f"rm -r {entry} && ln -s {secret.parent} {entry}",
                                    f"cat {secret}"))
    env = {"PATH": f"{entry}{os.pathsep}{os.environ['PATH']}"}
    cli("start", "p", "--name", "pl", "--every", "1h", "--after", "1h", "--cwd", str(work),
        "--command", command, "--sandbox", "on", env=env, check=0)
    cli("run", "pl", env=env)
    assert (script if where == "script" else entry).is_symlink()
    proc = cli("run", "pl", env=env)
    record = last(cli, "pl")
    log = log_of(cli, "pl", record)
    assert "Permission denied" in log and SECRET not in log + proc.stdout
