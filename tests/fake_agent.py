"""A stand-in coding agent for loopctl's integration tests.

Each option is one behaviour, applied in the order below:
  --record FILE     append {"argv", "env", "cwd", "stdin"} as one JSON line
  --print TEXT      print TEXT (repeatable)
  --stderr TEXT     print TEXT to stderr
  --flood BYTES     write BYTES bytes to stdout in 1 MiB chunks
  --line BYTES      write one line of BYTES bytes
  --invalid-utf8    write bytes that are not UTF-8
  --close-stdout    close stdout early, then keep going
  --grandchild S    spawn a grandchild that calls setsid() and sleeps S s;
                    its pid goes to $FAKE_AGENT_PIDS if set; the agent goes
                    on only once the grandchild is in its own session with
                    its pid written (or dead)
  --hydra DEPTH     start a tree of 2^(DEPTH+1)-1 processes that ignore SIGTERM,
                    each double-forked into a session of its own and still
                    forking while loopctl kills; pids to $FAKE_AGENT_PIDS
  --scrub-env       with --grandchild/--hydra: their environment is emptied
                    (no $LOOPCTL_RUN_MARK to find them by)
  --plant-log WHAT  replace this run's log with WHAT: symlink:TARGET,
                    hardlink:TARGET or fifo
  --plant-runs N    plant N forged run files (ids ...-9990 up) in the run folder
  --kill-parent     SIGKILL the parent (the supervisor), then go on
  --kill-when FILE  with --kill-parent: first wait (at most 60 s) until FILE exists
  --sleep S         sleep S seconds
  --wait-for FILE   wait (at most 60 s) until FILE exists
  --ignore-term     ignore SIGTERM (for kill escalation tests)
  --decide KIND     run `loopctl decide KIND` (with --summary/--next/--evidence)
  --exit N          exit with N
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time


def spawn_grandchild(seconds: float, scrub: bool = False) -> None:
    import subprocess

    pid_file = os.environ.get("FAKE_AGENT_PIDS")
    # The grandchild closes the pipe's write end once it has left the
    # session and written its pid; the agent waits for that (or for its
    # death) before going on. Without the wait a loaded machine could let
    # loopctl kill the grandchild before it wrote its pid, or while it was
    # still in the agent's process group (the easy case).
    ready_r, ready_w = os.pipe()
    code = (
        "import os, sys, time\n"
        "os.setsid()\n"
        f"pid_file = {pid_file!r}\n"
        "if pid_file:\n"
        "    with open(pid_file, 'a') as handle:\n"
        "        handle.write(f'{os.getpid()}\\n')\n"
        f"os.close({ready_w})\n"
        f"time.sleep({seconds})\n"
    )
    # The middle process exits at once, so the grandchild is orphaned and
    # outside the agent's process group: the hardest case to clean up.
    middle = (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', {code!r}], env={{}} if {scrub} else None,\n"
        f"                 pass_fds=[{ready_w}])\n"
    )
    subprocess.run([sys.executable, "-c", middle], check=True, pass_fds=[ready_w])
    os.close(ready_w)
    with os.fdopen(ready_r, "rb") as ready:
        ready.read()  # end of file: the grandchild closed its end, or died


HYDRA = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
os.setsid()
depth, pid_file, scrub = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
with open(pid_file, "a") as handle:
    handle.write(f"{os.getpid()}\\n")
def started():
    with open(pid_file) as handle:
        return sum(1 for _ in handle)
# Two children each, down to depth 0; the leaves keep forking new leaves
# (up to 150 processes in all), so any snapshot of the tree is out of date.
for _ in range(2 if depth > 0 else 10**6):
    if depth == 0 and started() >= 150:
        break
    time.sleep(0.05)  # still forking while loopctl is killing
    # Double fork: the middle exits, its child is re-parented.
    middle = "import subprocess, sys; subprocess.Popen(sys.argv[1:])"
    subprocess.run([sys.executable, "-c", middle, sys.executable, "-c", sys.argv[4],
                    str(max(depth - 1, 0)), pid_file, sys.argv[3], sys.argv[4]],
                   env={} if scrub else None)
while True:
    time.sleep(60)
"""


def spawn_hydra(depth: int, scrub: bool) -> None:
    import subprocess

    pid_file = os.environ["FAKE_AGENT_PIDS"]
    subprocess.Popen([sys.executable, "-c", HYDRA, str(depth), pid_file, "1" if scrub else "0",
                      HYDRA], env={} if scrub else None)


def plant_log(what: str) -> None:
    """Replace this run's log, as an agent with write access to its run
    folder could (DESIGN §14: it must gain nothing)."""
    folder = os.path.join(os.environ["LOOPCTL_HOME"], "state", "runs", os.environ["LOOPCTL_LOOP"])
    log = os.path.join(folder, os.environ["LOOPCTL_RUN_ID"] + ".log")
    os.unlink(log)
    if what == "fifo":
        os.mkfifo(log)
    elif what.startswith("hardlink:"):
        os.link(what.removeprefix("hardlink:"), log)
    else:
        os.symlink(what.removeprefix("symlink:"), log)


def plant_runs(count: int) -> None:
    folder = os.path.join(os.environ["LOOPCTL_HOME"], "state", "runs", os.environ["LOOPCTL_LOOP"])
    for i in range(count):
        run_id = f"20991130T031500Z-{9990 + i}"
        with open(os.path.join(folder, run_id + ".json"), "w") as handle:
            json.dump({"version": 1, "run_id": run_id, "loop": os.environ["LOOPCTL_LOOP"],
                       "outcome": "ok", "result": "FORGED RESULT", "exit_code": 0}, handle)
        with open(os.path.join(folder, run_id + ".log"), "w") as handle:
            handle.write("FORGED LOG\n")


def add_hostile(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hydra", type=int)
    parser.add_argument("--scrub-env", action="store_true")
    parser.add_argument("--plant-log")
    parser.add_argument("--plant-runs", type=int)
    parser.add_argument("--kill-parent", action="store_true")
    parser.add_argument("--kill-when")


def hostile(args: argparse.Namespace) -> None:
    """What an agent trying to escape its bounds does (DESIGN §14)."""
    if args.hydra is not None:
        spawn_hydra(args.hydra, args.scrub_env)
    if args.plant_log:
        plant_log(args.plant_log)
    if args.plant_runs:
        plant_runs(args.plant_runs)
    if args.kill_parent:
        if args.kill_when:  # the test says when: after the supervisor recorded this agent
            wait_for_file(args.kill_when)
        os.kill(os.getppid(), signal.SIGKILL)


def wait_for_file(path: str, seconds: float = 60) -> None:
    deadline = time.time() + seconds
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.02)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--record")
    parser.add_argument("--print", action="append", default=[])
    parser.add_argument("--stderr")
    parser.add_argument("--flood", type=int)
    parser.add_argument("--line", type=int)
    parser.add_argument("--invalid-utf8", action="store_true")
    parser.add_argument("--close-stdout", action="store_true")
    parser.add_argument("--grandchild", type=float)
    add_hostile(parser)
    parser.add_argument("--sleep", type=float)
    parser.add_argument("--wait-for")
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--decide")
    parser.add_argument("--summary", default="fake agent summary")
    parser.add_argument("--evidence", default="fake agent evidence")
    parser.add_argument("--next")
    parser.add_argument("--exit", type=int, default=0)
    parser.add_argument("rest", nargs="*")
    args = parser.parse_args()

    if args.record:
        stdin = "" if sys.stdin is None or sys.stdin.closed else sys.stdin.read()
        with open(args.record, "a") as handle:
            handle.write(json.dumps({
                "argv": sys.argv, "cwd": os.getcwd(), "stdin": stdin,
                "env": {k: v for k, v in os.environ.items()
                        if k.startswith(("LOOPCTL", "FAKE")) or k == "PWD"},
                "time": time.time(),
            }) + "\n")
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for text in args.print:
        print(text, flush=True)
    if args.stderr:
        print(args.stderr, file=sys.stderr, flush=True)
    out = sys.stdout.buffer
    if args.flood:
        chunk = b"x" * 1023 + b"\n"
        block = chunk * 1024
        left = args.flood
        while left > 0:
            piece = block[: min(left, len(block))]
            out.write(piece)
            left -= len(piece)
        out.flush()
    if args.line:
        out.write(b"y" * args.line + b"\n")
        out.flush()
    if args.invalid_utf8:
        out.write(b"bad bytes: \xff\xfe\xc3\x28\n")
        out.flush()
    if args.close_stdout:
        sys.stdout.flush()
        os.close(1)
    if args.grandchild is not None:
        spawn_grandchild(args.grandchild, args.scrub_env)
    hostile(args)
    if args.sleep:
        time.sleep(args.sleep)
    if args.wait_for:
        wait_for_file(args.wait_for)
    if args.decide:
        import subprocess

        cmd = [sys.executable, "-m", "loopctl", "decide", args.decide,
               "--summary", args.summary, "--evidence", args.evidence]
        if args.next:
            cmd += ["--next", args.next]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return args.exit


if __name__ == "__main__":
    sys.exit(main())
