"""What a notification costs in CPU: `loopctl start --notify URL` (which
checks the URL with Apprise's parser) and one detached delivery (the
delivery process and the sender it starts, to a local JSON endpoint), with
Apprise loading only the URL's plugin (as shipped) and loading all of them
(Apprise's own way), interleaved in one run.

The two cases differ only in a throwaway `sitecustomize` on PYTHONPATH: the
"all plugins" one stands in for `loopctl.integrations.apprise_plugins` a
module whose `load_for` does nothing, so Apprise loads every plugin the
first time it is asked about a scheme; the "as shipped" one is empty (both
shadow the system's sitecustomize alike). CPU is user+sys of the command and
everything it waited for (`os.wait4`), so the delivery's sender is included.

    python bench/notify_cpu.py [--reps 15]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import LOOPCTL, PY, Workspace, env_for  # noqa: E402

_STUB = """import sys, types
stub = types.ModuleType("loopctl.integrations.apprise_plugins")
stub.load_for = lambda urls: None
sys.modules[stub.__name__] = stub
"""


class _Quiet(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def _cpu_of(argv: list[str], env: dict[str, str], stdin: bytes = b"",
            cwd: str | None = None) -> float:
    """User+sys seconds of `argv` and all it waited for; it must exit 0."""
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.write(stdin)
    proc.stdin.close()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{argv[:4]} exited {proc.returncode}: {err.decode()[-500:]}")
    return usage.ru_utime + usage.ru_stime


def _start(home: Path, url: str, env: dict[str, str], n: int) -> float:
    return _cpu_of([LOOPCTL, "start", "--name", f"n{n}", "--command", "true",
                    "--every", "1h", "--notify", url], env)


def _deliver(home: Path, url: str, env: dict[str, str]) -> float:
    state = home / "state"
    state.mkdir(parents=True, exist_ok=True)
    log = home / "run.log"
    log.touch(mode=0o600, exist_ok=True)
    job = {"event": {"version": 1, "loop": "x", "status": "completed", "summary": "s",
                     "log": str(log)}, "targets": [url]}
    return _cpu_of([PY, "-m", "loopctl.integrations.notify"], env,
                   json.dumps(job).encode(), cwd=str(state))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"json://127.0.0.1:{server.server_address[1]}/hook"
    cpu: dict[str, list[float]] = {}
    with Workspace("notify") as ws:
        cases = {}
        for case, text in (("as shipped", ""), ("all plugins", _STUB)):
            folder = ws.root / case.replace(" ", "-")
            folder.mkdir()
            (folder / "sitecustomize.py").write_text(text)
            home = ws.home(case.replace(" ", "-"))
            cases[case] = (home, env_for(home, PYTHONPATH=str(folder),
                                         HOME=str(ws.root)))
        for n in range(args.reps):
            for case, (home, env) in cases.items():
                cpu.setdefault(f"start --notify, {case}", []).append(_start(home, url, env, n))
                cpu.setdefault(f"one delivery, {case}", []).append(_deliver(home, url, env))
    server.shutdown()
    medians = {what: statistics.median(values) for what, values in cpu.items()}
    for what, value in medians.items():
        print(f"{what:36s} {value * 1000:6.0f} ms CPU (median of {args.reps})")
    print("BENCH-RESULT " + json.dumps({k: round(v, 4) for k, v in medians.items()}))


if __name__ == "__main__":
    main()
