"""What the hostile-input tests share: strict JSON, one-line errors, template
homes made once per module by the real CLI, and file snapshots."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import loopctl_at
from loopctl.storage.statefile import read_state_file

HERE = Path(__file__).parent
HOSTILE_BIN = HERE / "bin"
FAKE_CLAUDE = HOSTILE_BIN / "claude"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"not strict JSON: {name}")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"not strict JSON: {text} overflows to {value}")
    return value


def strict_json(text: str | bytes) -> Any:
    """Parse JSON that a strict parser (no NaN, no Infinity) accepts."""
    return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)


def text_of(stream: str | bytes | None) -> str:
    if stream is None:
        return ""
    return stream if isinstance(stream, str) else stream.decode(errors="replace")


def no_traceback(proc: subprocess.CompletedProcess[Any]) -> None:
    for stream in (proc.stdout, proc.stderr):
        assert "Traceback" not in text_of(stream), text_of(stream)[-3000:]


def one_line_error(proc: subprocess.CompletedProcess[Any]) -> str:
    """The single non-empty stderr line of a failed command (no traceback)."""
    no_traceback(proc)
    lines = [line for line in text_of(proc.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {text_of(proc.stderr)!r}"
    return lines[0]


def non_finite(value: Any, where: str = "") -> list[str]:
    """Paths of every number in `value` that is NaN or infinite."""
    if isinstance(value, float) and not math.isfinite(value):
        return [where or "."]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in non_finite(v, f"{where}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in non_finite(v, f"{where}[{i}]")]
    return []


def strict_state(home: Path) -> dict[str, Any]:
    """state.json, which must be strict JSON (written with allow_nan=False)."""
    data = strict_json((home / "state" / "state.json").read_bytes())
    assert isinstance(data, dict)
    # As loopctl reads it: on disk an entry leaves out its fields at their
    # common value (LoopState.to_json).
    return read_state_file(home / "state" / "state.json")


def make_template(factory: pytest.TempPathFactory, *starts: list[str]) -> Path:
    """A home made by the CLI (`loopctl ARGS` for each of `starts`: a `start`
    through its entry point in this process, a `run` as a process), made
    once per module and copied into each test's home by `install`."""
    template = factory.mktemp("template") / "home"
    for args in starts:
        proc = loopctl_at(template, *args)
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    return template


def install(template: Path, home: Path) -> None:
    shutil.copytree(template, home, symlinks=True, copy_function=shutil.copy2)


def snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every entry under `folder` (symlinks not followed): bytes of files,
    `-> target` for symlinks, `<dir>` for directories."""
    out: dict[str, bytes | str] = {}
    if not folder.exists():
        return out
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        if path.is_symlink():
            out[rel] = "-> " + os.readlink(path)
        elif path.is_dir():
            out[rel] = "<dir>"
        elif not path.name.endswith(".lock"):
            out[rel] = path.read_bytes()
    return out
