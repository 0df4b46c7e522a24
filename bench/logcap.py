"""The run log's bound (`--max-log`, loopctl/engine/logcap.py) in isolation.
An agent (`head -c N /dev/zero`) writes:
- `direct`: straight into the O_APPEND log (what scheduled runs did before
  the bound);
- `trim`: the same, with loopctl's LogTrim watching (bound above N: its
  cost when nothing is cut), and `trim, cap 100 MiB` (cut back all along);
- `splice`: through a pipe that a thread splices into the log, then into
  /dev/null past the bound: the alternative measured and not taken (every
  byte copied twice in the kernel).
Interleaved repetitions; wall time from spawn until the log is final; CPU
of this process (the watcher or pump thread) and of the agent. `sync`
before each measurement, each file deleted after it.

    python bench/logcap.py [--quick] [--dir DIR]
"""

from __future__ import annotations

import argparse
import fcntl
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import cpu_with_children  # noqa: E402

from loopctl.engine.logcap import LogTrim  # noqa: E402

MiB = 1024 * 1024
CHUNK = 1024 * 1024
PIPE_SIZE = 1024 * 1024


class LogPump:
    """Agent output -> log (at most `limit` bytes) -> /dev/null."""

    def __init__(self, log_fd: int, limit: int) -> None:
        self.limit = limit
        self.written = 0
        self.truncated = False
        self.error: str | None = None
        read_end, self.write_end = os.pipe2(os.O_CLOEXEC)
        self._read_end = read_end
        try:
            fcntl.fcntl(self.write_end, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        except OSError:
            pass  # over /proc/sys/fs/pipe-max-size for this user: the default works
        self._out = os.open(f"/proc/self/fd/{log_fd}", os.O_WRONLY | os.O_CLOEXEC)
        os.lseek(self._out, 0, os.SEEK_END)
        self._thread = threading.Thread(target=self._pump, name="logcap", daemon=True)

    def start(self) -> None:
        """After the agent is spawned: our copy of the write end closes, so
        the pipe ends when the agent and everything it started are gone."""
        os.close(self.write_end)
        self._thread.start()

    def _pump(self) -> None:
        try:
            self._copy()
        except OSError as exc:
            # A full disk (ENOSPC) stops the log, not the run: drain the rest.
            self.error = exc.strerror
            self._discard()
        finally:
            os.close(self._read_end)
            os.close(self._out)

    def _copy(self) -> None:
        while self.written < self.limit:
            moved = os.splice(self._read_end, self._out, min(CHUNK, self.limit - self.written))
            if moved == 0:
                return
            self.written += moved
        self._discard()

    def _discard(self) -> None:
        null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        try:
            while True:
                try:
                    moved = os.splice(self._read_end, null, CHUNK)
                except OSError:
                    return
                if moved == 0:
                    return
                if self.error is None:
                    self.truncated = True
        finally:
            os.close(null)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)




def one(folder: Path, size: int, mode: str, cap: int | None) -> tuple[float, float]:
    path = folder / "run.log"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o600)
    os.sync()
    c0, t0 = cpu_with_children(), time.perf_counter()
    argv = ["head", "-c", str(size), "/dev/zero"]
    if cap is None:
        subprocess.run(argv, stdout=fd, check=True)
    elif mode.startswith("trim"):
        trim = LogTrim(fd, cap)
        proc = subprocess.Popen(argv, stdout=fd)
        trim.start()
        proc.wait()
        trim.stop()
    else:
        pump = LogPump(fd, cap)
        proc = subprocess.Popen(argv, stdout=pump.write_end)
        pump.start()
        proc.wait()
        pump.join()
    wall, used = time.perf_counter() - t0, cpu_with_children() - c0
    expected = size if cap is None else min(size, cap)
    assert os.fstat(fd).st_size == expected, (os.fstat(fd).st_size, expected)
    os.close(fd)
    path.unlink()
    return wall * 1000, used * 1000


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    size = (256 if args.quick else 1024) * MiB
    reps = 5 if args.quick else 9
    modes = {"direct": None, "trim": 2 * size, "trim, cap 100 MiB": 100 * MiB,
             "splice": 2 * size, "splice, cap 100 MiB": 100 * MiB}
    results: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for _ in range(reps + 1):  # the first round warms up, not counted
            for mode, cap in modes.items():
                results[mode].append(one(Path(tmp), size, mode, cap))
    base = statistics.median(w for w, _ in results["direct"][1:])
    base_cpu = statistics.median(c for _, c in results["direct"][1:])
    print(f"== logcap: {size // MiB} MiB, {reps} interleaved repetitions, {os.cpu_count()} CPUs, "
          f"dir {args.dir or tempfile.gettempdir()}")
    for mode, rows in results.items():
        wall = statistics.median(w for w, _ in rows[1:])
        used = statistics.median(c for _, c in rows[1:])
        print(f"  {mode:18s} wall med {wall:7.1f} ms ({wall / base:.2f}x)   "
              f"cpu med {used:7.1f} ms ({used / base_cpu:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
