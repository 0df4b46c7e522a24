"""What ships besides the code: completions, the man page, the wheel (issue 6)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import CLI, TESTS, loopctl_argv, tool
from loopctl.cli import gendocs

# The CLI's behaviour as a process is the subject: `start` too runs as one.
pytestmark = pytest.mark.real_processes

ROOT = TESTS.parent
BIN = os.path.dirname(sys.executable)


def test_generated_completions_and_man_page_are_current() -> None:
    for path, text in gendocs.generated().items():
        assert path.read_text() == text, f"{path} is stale: run `python -m loopctl.cli.gendocs`"


def test_man_pages_render_without_warnings() -> None:
    groff = shutil.which("groff")
    if not groff:
        pytest.skip("groff not installed")
    proc = subprocess.run([groff, "-man", "-Tutf8", "-ww", str(ROOT / "man" / "loops.yaml.5")],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    for section in ("NAME", "SYNOPSIS", "TOP-LEVEL KEYS", "LOOP KEYS", "SEE ALSO"):
        assert section in _plain(proc.stdout), section
    proc = subprocess.run([groff, "-man", "-Tutf8", "-ww", str(ROOT / "man" / "loopctl.1")],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    text = proc.stdout
    for section in ("NAME", "SYNOPSIS", "COMMANDS", "FILES", "ENVIRONMENT", "EXIT STATUS",
                    "EXAMPLES"):
        assert section in text.replace("\b", "").replace("_", "") or section in \
            _plain(text), section


def _plain(text: str) -> str:
    import re

    return re.sub(r".\x08", "", text)


def test_man_page_documents_every_command_and_option() -> None:
    page = _plain(subprocess.run(["groff", "-man", "-Tutf8", str(ROOT / "man" / "loopctl.1")],
                                 capture_output=True, text=True).stdout) \
        if shutil.which("groff") else (ROOT / "man" / "loopctl.1").read_text()
    page = page.replace("\\-", "-")
    tree = gendocs._command_tree()
    for command in gendocs._flatten(tree):
        assert command.name in page
        for option in command.options:
            if option.names[0] != "--help":
                assert option.names[0] in page, (command.name, option.names[0])


def complete(words: list[str], env: dict[str, str]) -> list[str]:
    script = (f"source {ROOT / 'completions' / 'loopctl.bash'}\n"
              f"COMP_WORDS=({' '.join(repr(w) for w in words)}); "
              f"COMP_CWORD={len(words) - 1}; _loopctl; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env,
                          check=True)
    return [line for line in proc.stdout.splitlines() if line]


def test_bash_completion_registers_and_completes_loop_names(cli: CLI) -> None:
    cli("start", "--name", "alpha", "--every", "1h", "--", "echo a", check=0)
    cli("start", "--name", "beta", "--every", "1h", "--", "echo b", check=0)
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"])
    registered = subprocess.run(
        ["bash", "-c", f"source {ROOT / 'completions' / 'loopctl.bash'} && complete -p loopctl"],
        capture_output=True, text=True, env=env)
    assert registered.returncode == 0 and "_loopctl" in registered.stdout
    assert complete(["loopctl", "pause", ""], env) == ["alpha", "beta"]
    assert complete(["loopctl", "logs", "a"], env) == ["alpha"]
    assert "claude" in complete(["loopctl", "start", "--agent", ""], env)
    assert complete(["loopctl", "start", "--overlap", "s"], env) == ["skip"]
    assert complete(["loopctl", "cron", ""], env) == ["install", "status", "uninstall"]
    assert "--kill" in complete(["loopctl", "stop", "--"], env)
    assert "start" in complete(["loopctl", "st"], env)


@pytest.mark.parametrize("shell,check", [("zsh", ["zsh", "-n"]),
                                         ("fish", ["fish", "--no-execute"])])
def test_other_completions_parse(shell: str, check: list[str]) -> None:
    if not shutil.which(check[0]):
        pytest.skip(f"{shell} not installed")
    proc = subprocess.run([*check, str(ROOT / "completions" / f"loopctl.{shell}")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_typer_completion_still_works(cli: CLI) -> None:
    # Typer finds the shell it runs under (its parent processes), as when a
    # person types it; under pytest-xdist alone there may be none to find.
    line = shlex.join(loopctl_argv("--show-completion"))
    proc = subprocess.run([tool("bash"), "-c", line + "; exit $?"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and "complete -o" in proc.stdout, proc.stderr


# What the wheel installs under its prefix, and from which file of the checkout.
SHARED_DATA = {
    "share/man/man1/loopctl.1": "man/loopctl.1",
    "share/man/man5/loops.yaml.5": "man/loops.yaml.5",
    "share/bash-completion/completions/loopctl": "completions/loopctl.bash",
    "share/zsh/site-functions/_loopctl": "completions/loopctl.zsh",
    "share/fish/vendor_completions.d/loopctl.fish": "completions/loopctl.fish",
}


def offline_pip(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """pip with no package index and no user or site configuration: what is
    built and installed comes from this checkout and this venv only."""
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    proc = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc


@pytest.mark.slow
def test_wheel_ships_the_man_page_and_completions(tmp_path: Path) -> None:
    """Built with no package index (hatchling comes with the test extra), so
    it runs wherever the tests run. `<name>.data/data/X` is what an installer
    puts at `<prefix>/X`. (Not installed here: `pip install --prefix` first
    uninstalls the loopctl of the running venv.)"""
    offline_pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                "-w", str(tmp_path), str(ROOT), cwd=tmp_path)
    (wheel,) = tmp_path.glob("loopctl-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        data = {name.split(".data/data/", 1)[1]: archive.read(name)
                for name in archive.namelist() if ".data/data/" in name}
    assert data == {dest: (ROOT / src).read_bytes() for dest, src in SHARED_DATA.items()}


def test_man_finds_both_pages_after_the_readme_install(tmp_path: Path) -> None:
    """Issue 51, item 17: after the README's venv install, with the venv's bin
    on PATH (`. .venv/bin/activate`) and no MANPATH, `man loopctl` and `man 5
    loops.yaml` find the pages the wheel put under the venv's share/man, and
    so does `systemd-analyze verify` for an exported unit's
    `Documentation=man:loopctl(1)`. The tests run from such a venv (the
    README's test command installs the checkout into it)."""
    env = {"PATH": f"{BIN}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(tmp_path),
           "LANG": "C.UTF-8"}
    # The page's title line, not its bytes: an editable install copied the
    # page when it was installed (the wheel's test compares the bytes).
    pages = ((["loopctl"], ".TH LOOPCTL 1 "), (["5", "loops.yaml"], ".TH LOOPS.YAML 5 "))
    for args, title in pages:
        proc = subprocess.run([tool("man"), "-w", *args], capture_output=True, text=True,
                              env=env, timeout=30)
        assert proc.returncode == 0, proc.stderr
        found = Path(proc.stdout.strip())
        assert found.is_relative_to(Path(sys.prefix)), found
        assert found.read_text().startswith(title), found
    unit = tmp_path / "loopctl-x.service"
    unit.write_text("[Unit]\nDescription=x\nDocumentation=man:loopctl(1) man:loops.yaml(5)\n\n"
                    "[Service]\nType=oneshot\nExecStart=/bin/true\n")
    proc = subprocess.run([tool("systemd-analyze"), "verify", str(unit)], capture_output=True,
                          text=True, env=env, timeout=60)
    assert "failed" not in proc.stderr, proc.stderr
