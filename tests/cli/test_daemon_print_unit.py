"""`loopctl daemon --print-unit` (issue 51, item 19): a systemd user unit
that runs this installation's daemon for this home, pinned like `cron
install`'s line (the Python, a PATH, the home), passing `systemd-analyze
verify`; the FAQ's unit (docs/faq.md) is the same unit with placeholders."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from export.simulator import parse_service

from conftest import CLI, TESTS, tool

FAQ = (TESTS.parent / "docs" / "faq.md").read_text()


def shape(unit: str) -> list[str]:
    """A unit without its machine's values: each Environment='s name, and
    ExecStart= without the Python path."""
    lines = []
    for line in unit.strip().splitlines():
        if line.startswith('Environment="'):
            line = "Environment=" + line[len('Environment="'):].split("=", 1)[0]
        elif line.startswith("ExecStart="):
            line = "ExecStart=PYTHON " + line.split('" ', 1)[1]
        lines.append(line)
    return lines


def print_unit(cli: CLI, tmp_path: Path, *args: str) -> str:
    """As a person runs it: no LOOPCTL_HOME, the XDG folders of their home."""
    env = {"XDG_CONFIG_HOME": str(tmp_path / "cfg"), "XDG_STATE_HOME": str(tmp_path / "st")}
    proc = subprocess.run([sys.executable, "-m", "loopctl", "daemon", "--print-unit", *args],
                          capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in dict(os.environ, **env).items()
                               if k != "LOOPCTL_HOME"})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_readme_unit_is_what_print_unit_writes(cli: CLI, tmp_path: Path) -> None:
    readme = FAQ.split("**How do I run the daemon under systemd?**", 1)[1]
    readme = readme.split("```ini\n", 1)[1].split("```", 1)[0]
    assert shape(print_unit(cli, tmp_path)) == shape(readme)


def test_the_unit_pins_this_home_and_python_and_verifies(cli: CLI, tmp_path: Path) -> None:
    odd = tmp_path / "odd 100% $HOME"
    text = print_unit(cli, tmp_path, "--serve", "127.0.0.1:0", "--tls-cert", str(odd / "c"),
                      "--tls-key", str(odd / "k"))
    unit = parse_service(text)
    assert unit["environment"]["XDG_CONFIG_HOME"] == str(tmp_path / "cfg")
    assert unit["environment"]["XDG_STATE_HOME"] == str(tmp_path / "st")
    assert unit["argv"] == [sys.executable, "-m", "loopctl", "daemon", "--serve",
                            "127.0.0.1:0", "--tls-cert", str(odd / "c"), "--tls-key",
                            str(odd / "k")]
    path = tmp_path / "loopctl.service"
    path.write_text(text)
    proc = subprocess.run([tool("systemd-analyze"), "verify", "--man=no", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "Failed to parse" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("args", [["--serve", ":abc"], ["--tls-cert", "c"]])
def test_bad_options_are_refused_not_written(cli: CLI, args: list[str]) -> None:
    proc = cli("daemon", "--print-unit", *args)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
