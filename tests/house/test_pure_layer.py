"""The pure layer does no I/O (issue 23, DESIGN §10): no module under
loopctl/domain, nor under loopctl/fast (the speed pieces below it), imports
a module that reads files, the clock, the environment or processes, imports
loopctl's outer layers, or calls what does (open, print, os.environ,
time.time, datetime.now, Path.read_text, ...). The time
zone a schedule is read in comes in as an argument (`clock.zone_of` reads the
system's). An AST check: cheap, and it names the line."""

from __future__ import annotations

import ast
from pathlib import Path

import loopctl.domain
import loopctl.fast

DOMAIN = Path(loopctl.domain.__file__).parent
FAST = Path(loopctl.fast.__file__).parent

# Modules whose purpose is I/O, the clock, the environment or processes.
IO_MODULES = {
    "os", "sys", "time", "pathlib", "io", "glob", "shutil", "tempfile", "fcntl", "signal",
    "select", "selectors", "socket", "ssl", "subprocess", "multiprocessing", "threading",
    "asyncio", "urllib", "http", "logging", "importlib", "sqlite3", "mmap", "resource",
    "pwd", "grp", "platform", "getpass", "locale", "random", "secrets", "uuid", "ctypes",
    "psutil", "filelock", "yaml", "apprise", "typer", "rich", "click",
}
# Parts of those that only compute: splitting a URL reads nothing.
PURE_PARTS = ("urllib.parse",)
# The layers above the pure one, and the two edge modules that read the
# clock and the environment.
OUTER = ("loopctl.storage", "loopctl.engine", "loopctl.integrations", "loopctl.agents",
         "loopctl.commands", "loopctl.cli", "loopctl.clock", "loopctl.settings",
         "loopctl.entry", "loopctl.__main__")
# Calls by bare name that do I/O (`__import__` would slip past the import check).
IO_CALLS = {"open", "print", "input", "__import__", "breakpoint"}
# Attributes that read or write the outside world whatever they hang off:
# os.environ, Path.read_text, ZoneInfo.from_file (the system zone is read at
# the edge), sys.stderr.
IO_ATTRIBUTES = {
    "environ", "environb", "getenv", "putenv", "read_text", "read_bytes", "write_text",
    "write_bytes", "from_file", "stdin", "stdout", "stderr", "tzset", "utcnow",
}
# Calls that read the clock or the machine: datetime.now(), date.today(),
# time.time(), Path.cwd(), Path.home().
CLOCK_CALLS = {("datetime", "now"), ("date", "today"), ("datetime", "today"),
               ("time", "time"), ("time", "monotonic"), ("time", "localtime"),
               ("Path", "cwd"), ("Path", "home")}

def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return []


def violations(source: str, filename: str) -> list[str]:
    """Each line of `source` that does or imports I/O, as `file:line: why`."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        for name in _imported(node):
            if name.split(".")[0] in IO_MODULES and not name.startswith(PURE_PARTS) \
                    or name.startswith(OUTER):
                found.append(f"{where}: imports {name}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in IO_CALLS:
            found.append(f"{where}: calls {node.func.id}()")
        if isinstance(node, ast.Attribute) and node.attr in IO_ATTRIBUTES:
            found.append(f"{where}: uses .{node.attr}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) \
                and (node.func.value.id, node.func.attr) in CLOCK_CALLS:
            found.append(f"{where}: calls {node.func.value.id}.{node.func.attr}()")
    return found


def test_the_pure_layer_does_no_io() -> None:
    modules = sorted(DOMAIN.glob("*.py"))
    assert len(modules) > 10  # the check looked where the layer is
    speed = sorted(FAST.glob("*.py"))
    assert len(speed) > 5
    modules += speed
    found = [v for path in modules
             for v in violations(path.read_text(encoding="utf-8"), path.name)]
    assert found == [], "\n".join(found)


def test_the_check_sees_each_kind_of_io() -> None:
    """Each way of doing I/O is caught, at module level and inside a function."""
    for line in ("import os", "from pathlib import Path", "import time",
                 "from loopctl import clock", "from loopctl.storage.store import Store",
                 "from loopctl.settings import knob", "import subprocess as sp",
                 "x = open('/etc/localtime', 'rb')", "print('hi')",
                 "tz = os.environ.get('TZ')", "t = datetime.now()", "t = time.time()",
                 "z = ZoneInfo.from_file(handle)", "s = path.read_text()",
                 "m = __import__('os')", "d = date.today()", "h = Path.home()"):
        assert violations(line, "probe.py"), line
        assert violations(f"def f():\n    {line}\n", "probe.py"), line
    assert violations("import math\nfrom datetime import datetime\n"
                      "from loopctl.domain.model import LoopDef\n"
                      "when = datetime.fromtimestamp(now, zone)\n"
                      "folder = inputs.home + loop.cwd\n", "probe.py") == []
