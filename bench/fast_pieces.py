"""What each speed piece of `loopctl/fast/` saves, by instruction count (issue 52).

    python bench/fast_pieces.py [--only digests,typing] [--jobs 2] [--daemon-runs 5]
    python bench/fast_pieces.py --ls-trees BEFORE,AFTER [--ls-sizes 10,10000]

For every piece (and for `TYPE_CHECKING = False`, which stands in for
`typing`) the script copies this checkout's `loopctl` package twice into a
temp dir: `with`, as it is, and `without-PIECE`, where the piece's module is
replaced by a shim that hands every use to the standard module it stands in
for (the `typing` variant imports `TYPE_CHECKING` from `typing` in every
module that says `TYPE_CHECKING = False`). Each copy is byte-compiled, then
run through the installed console script with `PYTHONPATH` set to it.

Each often-run command is counted under `valgrind --tool=callgrind
--trace-children=yes` (every process it starts counts: a `tick --wait`'s
supervisor and agent, a `run`'s), on a fresh copy of a home built with
bench/_common.py: 1,000 `every: 1h` loops driven by one tick (idle `tick`,
`ls`, `ls --json`, `status NAME`, `status --json NAME`), and one due
`command: [true]` loop (`tick --wait`, `run NAME`). A daemon-fired run is
bench/profiling/daemon_fire.py's `cg` figure (instructions per fire) for
each copy. Instruction counts do not drift with the machine's load, so one
count per cell is the figure.

Instructions are turned into milliseconds by a calibration made in the
same run: a fixed Python loop, counted under callgrind and timed natively
(the least CPU of several runs: the machine is shared, and load only ever
adds), minus `python -c pass` both ways.

The table: per command, `with` in M instructions, then per piece the
instructions the piece saves (without - with), in M and in ms, and as a
share of `with`. A piece earns its place where it saves >= 2 ms or >= 5%
on one of these commands (issue 52 item 3).

`--ls-trees`: instead, `ls` by instructions on a driven home of each of
`--ls-sizes` loops, for each checkout (a folder holding `loopctl/`): the
goal `ls` at 10,000 loops <= 3x of 10, without the drift of timings.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    LOOPCTL,
    copy_home,
    env_for,
    loop_entry,
    past_wake,
    reconciled,
    wait_until,
)

REPO = Path(__file__).resolve().parent.parent
BIG = 1000
STATUS_LOOP = "loop00005"

# Each shim gives the piece's names from the standard module it replaces.
SHIMS: dict[str, str] = {
    "data_class": '''
import dataclasses
from dataclasses import FrozenInstanceError, asdict, replace
from dataclasses import dataclass as record

def factory(make):
    return dataclasses.field(default_factory=make)

def fields(obj):
    return tuple(f.name for f in dataclasses.fields(obj))

is_record = dataclasses.is_dataclass
''',
    "jsonfast": '''
from json import JSONDecodeError, dumps, loads
from json.encoder import c_make_encoder, encode_basestring_ascii

def refuse_constant(word):
    raise ValueError(f"{word} is not a number loopctl writes")
''',
    "flatjson": '''
import json

def parse(text):
    try:
        found = json.loads(text)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None
''',
    "jsontext": '''
import json

class Table:
    def __init__(self, keys, columns, count, same=()):
        self.keys, self.columns, self.count = list(keys), list(columns), count

    def rows(self):
        return [dict(zip(self.keys, row, strict=True))
                for row in zip(*self.columns, strict=True)] if self.columns else \\
            [{} for _ in range(self.count)]

def _default(value):
    return value.rows() if isinstance(value, Table) else str(value)

def dumps(data):
    return json.dumps(data, indent=2, default=_default, allow_nan=False)

def pieces(data):
    return [dumps(data)]

def chunks(parts):
    return iter(parts)
''',
    "lazy_re": '''
import re

class LazyPattern:  # compiled at once, as re.compile does; the same interface
    def __init__(self, pattern, flags=0):
        self._compiled = re.compile(pattern, flags)

    def compiled(self):
        return self._compiled

    def __getattr__(self, name):
        return getattr(self._compiled, name)

lazy = LazyPattern
''',
    "digests": '''
import hashlib
import hmac
from hashlib import sha256
from hmac import compare_digest

def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()

def hmac_sha256(key, data):
    return hmac.new(key, data, hashlib.sha256).hexdigest()
''',
    "dates": '''
from datetime import datetime, timedelta, timezone, tzinfo
''',
}
PIECES = [*SHIMS, "typing"]

# (label, home, arguments)
COMMANDS = [
    ("idle tick", "big", ["tick"]),
    ("tick --wait (1 due)", "due", ["tick", "--wait"]),
    ("run NAME", "due", ["run", "cpu"]),
    ("ls", "big", ["ls"]),
    ("ls --json", "big", ["ls", "--json"]),
    ("status NAME", "big", ["status", STATUS_LOOP]),
    ("status --json NAME", "big", ["status", "--json", STATUS_LOOP]),
]
DAEMON = "daemon-fired run"


def make_copy(root: Path, piece: str | None) -> Path:
    """A copy of the package, `piece` replaced by the standard module."""
    tree = root / (f"without-{piece}" if piece else "with")
    shutil.copytree(REPO / "loopctl", tree / "loopctl",
                    ignore=shutil.ignore_patterns("__pycache__"))
    if piece == "typing":
        for module in (tree / "loopctl").rglob("*.py"):
            text = module.read_text()
            if "TYPE_CHECKING = False" in text:
                module.write_text(re.sub(r"^(\s*)TYPE_CHECKING = False.*$",
                                         r"\1from typing import TYPE_CHECKING", text,
                                         flags=re.M))
    elif piece:
        (tree / "loopctl" / "fast" / f"{piece}.py").write_text(SHIMS[piece].lstrip())
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "loopctl")],
                   check=True)
    return tree


def templates(root: Path) -> dict[str, Path]:
    big = root / "tpl-big"
    reconciled(big, [loop_entry(f"loop{i:05d}", ["true"], every="1h", after="1h")
                     for i in range(BIG)])
    due = root / "tpl-due"
    reconciled(due, [loop_entry("cpu", ["true"], every="1h", after="20s", max_runs=0,
                                sandbox="off")])
    past_wake(due)
    return {"big": big, "due": due}


def count(tree: Path, home: Path, args: list[str], logs: Path) -> int:
    """Instructions of `loopctl ARGS` and of every process it started."""
    logs.mkdir()
    env = env_for(home, PYTHONPATH=str(tree))
    cmd = ["valgrind", "--tool=callgrind", "--trace-children=yes",
           "--callgrind-out-file=/dev/null", f"--log-file={logs}/cg.%p", LOOPCTL, *args]
    done = subprocess.run(cmd, env=env, cwd=logs, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} in {tree.name}: exit {done.returncode}: "
                           f"{done.stderr.strip()[-400:]}")

    def totals() -> list[int] | None:
        found = [re.search(r"Collected : (\d+)", f.read_text()) for f in logs.glob("cg.*")]
        return None if None in found else [int(m.group(1)) for m in found if m]

    wait_until(totals, f"{' '.join(args)}: every process's count", timeout=300, step=0.2)
    return sum(totals() or [])


def daemon_fire(tree: Path) -> int:
    script = REPO / "bench" / "profiling" / "daemon_fire.py"
    out = subprocess.run([sys.executable, str(script), "cg", "--runs", str(ARGS.daemon_runs),
                          "--tree", str(tree)], capture_output=True, text=True, check=True)
    m = re.search(r": ([\d.]+)M instructions per fire", out.stdout)
    if m is None:
        raise RuntimeError(f"daemon_fire.py said: {out.stdout} {out.stderr[-400:]}")
    return int(float(m.group(1)) * 1e6)


CALIBRATION = "x = 0\nfor i in range(1_000_000):\n    x += i\n"


def cpu_ms(code: str) -> float:
    """The least CPU (user+sys) of 7 runs of `python -c code`, in ms."""
    best = float("inf")
    for _ in range(7):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-S", "-c", code], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        best = min(best, (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
                   * 1000)
    return best


def instructions(code: str) -> int:
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                           sys.executable, "-S", "-c", code],
                          capture_output=True, text=True, check=True)
    m = re.search(r"Collected : (\d+)", done.stderr)
    assert m, done.stderr
    return int(m.group(1))


def per_ms() -> tuple[float, int]:
    """(instructions per ms of CPU on this machine, `python -c pass`'s count)."""
    base = instructions("pass")
    work = instructions(CALIBRATION) - base
    ms = cpu_ms(CALIBRATION) - cpu_ms("pass")
    return work / ms, base


def measure(root: Path, pieces: list[str]) -> dict[str, dict[str, int]]:
    """{variant: {command: instructions}}; variant "with" or a piece."""
    trees = {"with": make_copy(root, None)} | {p: make_copy(root, p) for p in pieces}
    homes = templates(root)
    jobs = [(variant, label, home, args) for label, home, args in COMMANDS
            for variant in trees]
    found: dict[str, dict[str, int]] = {variant: {} for variant in trees}
    with concurrent.futures.ThreadPoolExecutor(ARGS.jobs) as pool:
        futures = {}
        for n, (variant, label, home, args) in enumerate(jobs):
            copy = copy_home(homes[home], root / f"home-{n}")
            futures[pool.submit(count, trees[variant], copy, args, root / f"logs-{n}")] = \
                (variant, label)
        if ARGS.daemon_runs:
            for variant, tree in trees.items():
                futures[pool.submit(daemon_fire, tree)] = (variant, DAEMON)
        for future in concurrent.futures.as_completed(futures):
            variant, label = futures[future]
            try:
                found[variant][label] = future.result()
            except (RuntimeError, subprocess.CalledProcessError) as error:
                print(f"  {variant:>10} {label:<22} failed: {error}", file=sys.stderr)
                continue
            print(f"  {variant:>10} {label:<22} {found[variant][label] / 1e6:8.1f}M",
                  file=sys.stderr, flush=True)
    return found


def table(found: dict[str, dict[str, int]], rate: float, base: int) -> str:
    labels = [label for label, _, _ in COMMANDS] + ([DAEMON] if ARGS.daemon_runs else [])
    pieces = [v for v in found if v != "with"]
    lines = ["| command | with (M instr, ms) | " + " | ".join(
        f"`{p}` saves" for p in pieces) + " |", "|---" * (len(pieces) + 2) + "|"]
    earns = dict.fromkeys(pieces, False)
    for label in labels:
        with_ = found["with"].get(label)
        if with_ is None:
            continue
        cells = []
        for piece in pieces:
            if label not in found[piece]:
                cells.append("failed")
                continue
            saved = found[piece][label] - with_
            ms, share = saved / rate, saved / with_
            earns[piece] |= ms >= 2 or share >= 0.05
            cells.append(f"{saved / 1e6:+.1f}M {ms:+.2f} ms {share:+.1%}")
        lines.append(f"| {label} | {with_ / 1e6:.1f}M {with_ / rate:.1f} ms | "
                     + " | ".join(cells) + " |")
    lines.append("| earns its place (>= 2 ms or >= 5%) | | " + " | ".join(
        "yes" if earns[p] else "**no**" for p in pieces) + " |")
    lines.append(f"\nCalibration: {rate / 1e3:.0f}k instructions per ms of CPU "
                 f"(`python -c pass` {base / 1e6:.1f}M, {base / rate:.1f} ms).")
    return "\n".join(lines)


def ls_scale(trees: list[Path], sizes: list[int]) -> None:
    """`ls` at each size by instructions, for each checkout: the goal `ls`
    at 10,000 loops <= 3x of 10, without the drift of timings."""
    root = Path(tempfile.mkdtemp(prefix="loopctl-bench-fast-"))
    try:
        homes = {}
        for size in sizes:
            homes[size] = root / f"tpl-{size}"
            reconciled(homes[size], [loop_entry(f"loop{i:05d}", ["true"], every="1h",
                                                after="1h") for i in range(size)])
        for n, tree in enumerate(trees):
            found = {size: count(tree, copy_home(homes[size], root / f"home-{n}-{size}"),
                                 ["ls"], root / f"logs-{n}-{size}") for size in sizes}
            print(f"| {tree} | " + " | ".join(f"{found[s] / 1e6:.1f}M" for s in sizes)
                  + f" | {found[sizes[-1]] / found[sizes[0]]:.2f}x |")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated pieces (default: all of them)")
    ap.add_argument("--jobs", type=int, default=2, help="callgrinds at once")
    ap.add_argument("--daemon-runs", type=int, default=5,
                    help="fires per daemon_fire.py count (0: leave the daemon out)")
    ap.add_argument("--ls-trees", help="instead: `ls` by instructions at --ls-sizes loops "
                    "for each of these comma-separated checkouts (folders holding loopctl/)")
    ap.add_argument("--ls-sizes", default="10,10000")
    global ARGS
    ARGS = ap.parse_args()
    if ARGS.ls_trees:
        ls_scale([Path(t).resolve() for t in ARGS.ls_trees.split(",")],
                 [int(n) for n in ARGS.ls_sizes.split(",")])
        return 0
    wanted = ARGS.only.split(",") if ARGS.only else PIECES
    unknown = set(wanted) - set(PIECES)
    if unknown:
        ap.error(f"no such piece: {', '.join(sorted(unknown))} (known: {', '.join(PIECES)})")
    present = [p for p in wanted
               if p == "typing" or (REPO / "loopctl" / "fast" / f"{p}.py").exists()]
    root = Path(tempfile.mkdtemp(prefix="loopctl-bench-fast-"))
    started = time.strftime("%H:%M", time.gmtime())
    try:
        rate, base = per_ms()
        found = measure(root, present)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"`python bench/fast_pieces.py` ({started}-{time.strftime('%H:%M', time.gmtime())} "
          "UTC)\n")
    print(table(found, rate, base))
    return 0


ARGS: argparse.Namespace

if __name__ == "__main__":
    sys.exit(main())
