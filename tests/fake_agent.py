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
                    its pid goes to $FAKE_AGENT_PIDS if set
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
import subprocess
import sys
import time


def spawn_grandchild(seconds: float) -> None:
    code = (
        "import os, sys, time\n"
        "os.setsid()\n"
        "pid_file = os.environ.get('FAKE_AGENT_PIDS')\n"
        "if pid_file:\n"
        "    open(pid_file, 'a').write(f'{os.getpid()}\\n')\n"
        f"time.sleep({seconds})\n"
    )
    # The middle process exits at once, so the grandchild is orphaned and
    # outside the agent's process group: the hardest case to clean up.
    middle = (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', {code!r}])\n"
    )
    subprocess.run([sys.executable, "-c", middle], check=True)


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
        spawn_grandchild(args.grandchild)
    if args.sleep:
        time.sleep(args.sleep)
    if args.wait_for:
        deadline = time.time() + 60
        while not os.path.exists(args.wait_for) and time.time() < deadline:
            time.sleep(0.05)
    if args.decide:
        cmd = [sys.executable, "-m", "loopctl", "decide", args.decide,
               "--summary", args.summary, "--evidence", args.evidence]
        if args.next:
            cmd += ["--next", args.next]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return args.exit


if __name__ == "__main__":
    sys.exit(main())
