"""A loop's name-only env entries (`--env KEY`: the driver's environment at
fire time) travel into the local exports (issue 51, item 16): the crontab
line and the systemd unit carry the exporting shell's value, which arrives
byte for byte in the agent's environment however hostile (`%`, `\\%`,
quotes, `$(...)`, a line break for systemd), and never becomes code.
A name this shell lacks is said, not silently dropped; `doctor` says when
the driver or an installed export lacks it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import CLI, TESTS, agent_command, tool, wait_for
from export.simulator import FAKE_BIN, parse_service
from export.support import export, start
from loopctl.domain.model import LoopDef

# Each piece once broke a quoting: cron's `%` and `\%`, the shell's quotes,
# `$`, backticks and `$(...)`, systemd's `%` specifiers and `\` escapes.
HOSTILE = ("a\\%b 100% $HOME \"dq\" 'sq' `touch PWNED1` $(touch PWNED2); "
           "\\\\% %% %n \\x25 tail\\")


def cron_reads(line: str) -> tuple[str, str]:
    """The command Debian's cron hands to /bin/sh, and the rest it sends to
    stdin: Vixie cron's do_command.c, ported. An unescaped `%` ends the
    command; `\\%` becomes `%`; a backslash before anything else stays, and
    the character after it is taken as it is (so `\\\\%` still ends it)."""
    out: list[str] = []
    escaped = False
    for index, ch in enumerate(line):
        if escaped:
            if ch == "%":
                out[-1] = "%"
            else:
                out.append(ch)
            escaped = False
            continue
        if ch == "\\":
            escaped = True
            out.append(ch)
            continue
        if ch == "%":
            return "".join(out), line[index + 1:]
        out.append(ch)
    return "".join(out), ""


def systemd_words(value: str) -> list[str]:
    """An `Environment=` value as systemd reads it (systemd.syntax(7)):
    words, double quotes with C escapes, then `%` specifiers (`%%` is `%`;
    any other specifier is a failure here: it would expand)."""
    words, word, quoted, chars = [], None, False, iter(value)
    escapes = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "'": "'"}
    for ch in chars:
        if ch == "\\":
            word = (word or "") + escapes[next(chars)]
        elif ch == '"':
            quoted, word = not quoted, word or ""
        elif ch == " " and not quoted:
            if word is not None:
                words.append(word)
            word = None
        else:
            word = (word or "") + ch
    assert not quoted, value
    if word is not None:
        words.append(word)
    for text in words:
        assert "%" not in text.replace("%%", ""), f"a specifier systemd expands: {text!r}"
    return [text.replace("%%", "%") for text in words]


def cron_env() -> dict[str, str]:
    """What cron gives a job: next to nothing (the line sets the rest)."""
    return {"PATH": "/usr/bin:/bin", "SHELL": "/bin/sh", "LANG": "C.UTF-8"}


@pytest.fixture
def needs_token(cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("FAKE_TOKEN", raising=False)
    record = tmp_path / "record.jsonl"
    start(cli, "envy", "--every", "1h", "--command", agent_command("--record", str(record)),
          "--env", "FAKE_TOKEN")
    return record


def recorded_token(record: Path) -> str | None:
    (entry,) = [json.loads(line) for line in record.read_text().splitlines()]
    value = entry["env"].get("FAKE_TOKEN")
    return value if isinstance(value, str) else None


def test_crontab_line_carries_a_hostile_value_as_data(cli: CLI, tmp_path: Path,
                                                      needs_token: Path) -> None:
    files = export(cli, "envy", "crontab", tmp_path / "out", env={"FAKE_TOKEN": HOSTILE})
    (job,) = [line for line in files["envy.crontab"].splitlines()
              if not line.startswith("CRON_TZ=")]
    command, stdin = cron_reads(job.split(" ", 5)[5])
    assert stdin == "", f"cron would cut the command at a %: {stdin!r}"
    cron_home = tmp_path / "cron-home"
    cron_home.mkdir()
    proc = subprocess.run(["/bin/sh", "-c", command], env=dict(cron_env(), HOME=str(cron_home)),
                          cwd=cron_home, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, (proc.stdout, proc.stderr, command)
    assert recorded_token(needs_token) == HOSTILE
    assert not list(cron_home.glob("PWNED*")) and not list(tmp_path.glob("PWNED*"))


def test_systemd_unit_carries_a_hostile_value_and_verifies(cli: CLI, tmp_path: Path,
                                                           needs_token: Path) -> None:
    value = HOSTILE + "\nsecond line\r"
    out = tmp_path / "out"
    files = export(cli, "envy", "systemd", out, env={"FAKE_TOKEN": value})
    service = files["loopctl-envy.service"]
    lines = [line for line in service.splitlines() if line.startswith("Environment=\"FAKE_TOKEN=")]
    assert len(lines) == 1, service
    assert systemd_words(lines[0][len("Environment="):]) == [f"FAKE_TOKEN={value}"]
    analyze = tool("systemd-analyze")
    proc = subprocess.run([analyze, "verify", "--man=no", *map(str, sorted(out.iterdir()))],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "Failed to parse" not in proc.stderr, proc.stderr
    unit = parse_service(service)
    env = dict(cron_env(), HOME=str(tmp_path), PATH=f"{FAKE_BIN}{os.pathsep}/usr/bin:/bin")
    env.update({k: v for k, v in unit["environment"].items() if k != "FAKE_TOKEN"})
    env["FAKE_TOKEN"] = value  # as systemd_words read it, checked above
    fired = subprocess.run(unit["argv"], env=env, cwd=unit["workdir"], capture_output=True,
                           text=True, timeout=60)
    assert fired.returncode == 0, fired.stderr
    assert recorded_token(needs_token) == value


@pytest.mark.parametrize("target", ["crontab", "systemd"])
def test_a_name_this_shell_lacks_is_said(cli: CLI, needs_token: Path, target: str) -> None:
    proc = cli("export", "envy", "--to", target)
    assert proc.returncode == 0, proc.stderr
    assert "FAKE_TOKEN" not in proc.stdout
    assert "envy takes FAKE_TOKEN from the driver's environment" in proc.stderr
    assert "this shell lacks it" in proc.stderr


@pytest.mark.parametrize("target,value", [
    ("crontab", "one\ntwo"), ("crontab", "one\rtwo"), ("systemd", "not utf-8 \udcff"),
    ("crontab", "x" * 20_000), ("systemd", "x" * 20_000)])
def test_what_cannot_be_carried_is_refused_in_one_line(cli: CLI, needs_token: Path,
                                                        target: str, value: str) -> None:
    proc = cli("export", "envy", "--to", target, env={"FAKE_TOKEN": value})
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("loopctl: error: cannot carry --env FAKE_TOKEN"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_doctor_says_an_installed_unit_lacks_the_name(cli: CLI, tmp_path: Path,
                                                      needs_token: Path) -> None:
    units = Path(os.environ["XDG_CONFIG_HOME"], "systemd", "user")
    export(cli, "envy", "systemd", units)  # made where FAKE_TOKEN is unset
    said = env_findings(cli)
    assert len(said) == 1 and "FAKE_TOKEN" in said[0] and "systemd unit" in said[0], said
    export(cli, "envy", "systemd", units, env={"FAKE_TOKEN": "present"})
    assert env_findings(cli) == []


def env_findings(cli: CLI, env: dict[str, str] | None = None) -> list[str]:
    proc = cli("doctor", "--json", env=env)
    return [f["message"] for f in json.loads(proc.stdout)["findings"] if f["check"] == "env"]


def test_doctor_says_the_daemon_lacks_the_name(cli: CLI, tmp_path: Path,
                                               needs_token: Path) -> None:
    lease = cli.state_dir / "lease.json"
    for env, expected in (({}, 1), ({"FAKE_TOKEN": "here"}, 0)):
        with (tmp_path / "daemon.log").open("w") as log:
            proc = cli.popen("daemon", "--quiet", env=env, stderr=log)
        try:
            wait_for(lambda pid=proc.pid: lease.exists()
                     and json.loads(lease.read_text()).get("pid") == pid)
            said = env_findings(cli)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=15)
        assert len(said) == expected, said
        assert all(f"the daemon's (pid {proc.pid})" in s and "FAKE_TOKEN" in s for s in said)


def test_cron_environment_is_the_table_and_the_line() -> None:
    from loopctl.commands.doctor_env import check_env, line_assignments, table_variables

    line = ("* * * * * PATH='/a b'\\%'c' LOOPCTL_HOME=/h /usr/bin/python3 -m loopctl tick "
            "X=1 >> /log 2>&1 # loopctl tick for /h")
    assert line_assignments(line) == {"PATH": "/a b%c", "LOOPCTL_HOME": "/h"}
    table = ["MAILTO=''", "# OLD=1", " FAKE_TOKEN=x", line]
    assert table_variables(table) == {"MAILTO", "FAKE_TOKEN"}
    found: list[str] = []
    loop = LoopDef(name="l", prompt="p", env={"FAKE_TOKEN": None, "GIVEN": "v", "X": None})
    check_env([loop], table_variables(table) | set(line_assignments(line) or {}),
              "cron's environment", "fix", lambda *f: found.append(f[2]))
    assert len(found) == 1 and "takes X from" in found[0], found


def test_doctor_says_an_exported_crontab_line_lacks_the_name(cli: CLI, tmp_path: Path,
                                                             needs_token: Path) -> None:
    table = tmp_path / "table"
    env = {"LOOPCTL_CRONTAB": str(TESTS / "cronbin" / "crontab"),
           "FAKE_CRONTAB_FILE": str(table)}
    job = export(cli, "envy", "crontab", tmp_path / "out")["envy.crontab"]
    table.write_text(job)
    said = env_findings(cli, env)
    assert len(said) == 1 and "its exported crontab line" in said[0], said
    table.write_text("FAKE_TOKEN=from-the-table\n" + job)  # cron gives it to every job
    assert env_findings(cli, env) == []
    other = job.replace(f"LOOPCTL_HOME={cli.home}", f"LOOPCTL_HOME={tmp_path / 'other'}")
    table.write_text(other)  # another home's line is that home's business
    assert other != job and env_findings(cli, env) == []
