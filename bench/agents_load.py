"""What real agent CLIs cost this machine, one and several at once: the
measurement behind the default `max_concurrent` (DESIGN §18, bench/README.md).

Each CLI (pinned, installed under $LOOPCTL_E2E_BIN like the end-to-end
tests) runs headless as its preset would run it, against the local stub of
its model API from tests/e2e/ (nothing leaves 127.0.0.1). The stub waits
`--think` seconds before each answer, as a real model does; the run asks for
one shell command, then ends. For N = 1, 2, 4, ... agents started together
it reports each agent's peak RSS (its whole process tree), CPU seconds per
run, the machine's load, and how long a trivial command (`python -c pass`)
takes while they run, against the same probe with nothing running (the
ratio is how much slower the laptop feels).

    .venv/bin/python bench/agents_load.py [--agents claude,codex,gemini]
        [--counts 1,2,4,8] [--think 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from e2e import claude_stub, codex_stub, gemini_stub  # noqa: E402
from e2e.common import BIN, Stub  # noqa: E402

PROMPT = "Run `echo hello` with the shell tool, then say you are done."
BASE_ENV = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
            "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
            "DISABLE_ERROR_REPORTING": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "GEMINI_TELEMETRY_ENABLED": "false"}


def slow(handler: Callable[[Any], Any], think: float) -> Callable[[Any], Any]:
    def answer(request: Any) -> Any:
        time.sleep(think)
        return handler(request)
    return answer


def claude_setup(stack: ExitStack, home: Path, think: float) -> tuple[list[str], dict[str, str]]:
    model = claude_stub.ClaudeModel("echo hello", final="done")
    stub = stack.enter_context(Stub(slow(model.handle, think)))
    return ([str(BIN / "claude"), "-p", "--output-format", "json", "--permission-mode",
             "acceptEdits", "--allowedTools=Bash(echo *)", "--", PROMPT],
            {"ANTHROPIC_BASE_URL": stub.url, "ANTHROPIC_API_KEY": "sk-ant-test"})


def codex_setup(stack: ExitStack, home: Path, think: float) -> tuple[list[str], dict[str, str]]:
    model = codex_stub.CodexModel(codex_stub.Turn(final="done", command="echo hello"))
    stub = stack.enter_context(Stub(slow(model, think)))
    codex_stub.install(home, stub.url)
    return ([str(BIN / "codex"), "exec", "--sandbox", "workspace-write", "--json",
             "--skip-git-repo-check", "-"], {codex_stub.KEY_ENV: codex_stub.KEY})


def gemini_setup(stack: ExitStack, home: Path, think: float) -> tuple[list[str], dict[str, str]]:
    model = gemini_stub.GeminiModel("echo hello", final="done")
    settings = home / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}))
    stub = stack.enter_context(Stub(slow(model, think)))
    env = {"GOOGLE_GEMINI_BASE_URL": stub.url, "GEMINI_API_KEY": "dummy",
           "GEMINI_CLI_NO_RELAUNCH": "1"}
    return ([str(BIN / "gemini"), "--output-format", "json", "--approval-mode", "auto_edit",
             "--skip-trust", "--allowed-tools=run_shell_command(echo)", f"--prompt={PROMPT}"],
            env)


SETUPS = {"claude": claude_setup, "codex": codex_setup, "gemini": gemini_setup}


def tree_sample(proc: psutil.Process, cpu: dict[tuple[int, float], float]) -> int:
    """The tree's RSS now; each member's CPU seconds so far go into `cpu`
    (the last value seen per process: a process that exits keeps it)."""
    total = 0
    try:
        members = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    for p in members:
        try:
            with p.oneshot():
                total += p.memory_info().rss
                t = p.cpu_times()
                cpu[(p.pid, p.create_time())] = t.user + t.system
        except psutil.Error:
            pass
    return total


def probe_once() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-S", "-c", "pass"], check=True)
    return time.perf_counter() - start


class Prober(threading.Thread):
    """`python -c pass` back to back (with a short pause), timed."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.times: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.times.append(probe_once())
            self.stop.wait(0.1)


def run_wave(name: str, count: int, think: float, root: Path) -> dict[str, Any]:
    with ExitStack() as stack:
        procs = []
        prober = Prober()
        for i in range(count):
            home = root / f"{name}-{count}-{i}"
            (home / "work").mkdir(parents=True)
            argv, env = SETUPS[name](stack, home, think)
            env = {**os.environ, **BASE_ENV, **env, "HOME": str(home)}
            stdin = subprocess.PIPE if name == "codex" else subprocess.DEVNULL
            procs.append(subprocess.Popen(argv, cwd=home / "work", env=env, stdin=stdin,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for p in procs:
            if p.stdin:
                p.stdin.write(PROMPT.encode())
                p.stdin.close()
        handles = [psutil.Process(p.pid) for p in procs]
        peaks = [0] * count
        cpu: dict[tuple[int, float], float] = {}
        prober.start()
        psutil.cpu_percent()
        cpu_samples, load_start = [], time.monotonic()
        while any(p.poll() is None for p in procs):
            for i, h in enumerate(handles):
                peaks[i] = max(peaks[i], tree_sample(h, cpu))
            cpu_samples.append(psutil.cpu_percent(interval=0.25))
        wall = time.monotonic() - load_start
        prober.stop.set()
        prober.join()
        codes = [p.returncode for p in procs]
    return {"agent": name, "n": count, "wall_s": round(wall, 1), "codes": codes,
            "peak_rss_mb_each": round(statistics.median(peaks) / 2**20),
            "peak_rss_mb_total": round(sum(peaks) / 2**20),
            "cpu_s_per_agent": round(sum(cpu.values()) / count, 2),
            "machine_cpu_pct_median": round(statistics.median(cpu_samples or [0])),
            "probe_ms_median": round(statistics.median(prober.times or [0]) * 1000, 1),
            "probe_ms_max": round(max(prober.times or [0]) * 1000, 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", default="claude,codex,gemini")
    parser.add_argument("--counts", default="1,2,4,8")
    parser.add_argument("--think", type=float, default=4.0)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="loopctl-bench-agents-"))
    idle = [probe_once() for _ in range(15)]
    baseline = statistics.median(idle) * 1000
    print(f"idle probe (python -S -c pass): {baseline:.1f} ms median", flush=True)
    results = []
    for name in args.agents.split(","):
        for count in (int(c) for c in args.counts.split(",")):
            row = run_wave(name, count, args.think, root)
            row["probe_ratio"] = round(row["probe_ms_median"] / baseline, 2)
            row["probe_max_ratio"] = round(row["probe_ms_max"] / baseline, 2)
            results.append(row)
            print(json.dumps(row), flush=True)
    print("BENCH-RESULT " + json.dumps({"idle_probe_ms": round(baseline, 1), "rows": results}))


if __name__ == "__main__":
    main()
