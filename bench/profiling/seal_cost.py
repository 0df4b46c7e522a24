"""What sealing the derived files and sanitizing every cell cost (issue 25;
not part of run_all): CPU time in-process (`time.process_time`, median) of
a cached read of the definitions, a read of the state, the HMACs inside
them, reading the home key, and `untrusted.line` over every cell of `ls`,
at 10 and at `--loops N` (default 10,000) loops.

    python bench/profiling/seal_cost.py [--loops 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import loop_entry, write_loops  # noqa: E402


def cpu_ms(fn: Callable[[], object], reps: int) -> float:
    times = []
    for _ in range(reps):
        begin = time.process_time()
        fn()
        times.append((time.process_time() - begin) * 1000)
    return statistics.median(times)


def measure(loops: int, root: Path) -> dict[str, float]:
    home = root / f"home-{loops}"
    write_loops(home, [loop_entry(f"l{i}", ["true"], after="1h") for i in range(loops)])
    os.environ["LOOPCTL_HOME"] = str(home)
    subprocess.run([sys.executable, "-m", "loopctl", "tick"], check=True, capture_output=True)
    from loopctl.domain.untrusted import line
    from loopctl.storage import home_key
    from loopctl.storage.store import Store

    key = home_key.load(home / "state")
    assert key is not None, "no home key after a tick"
    cache = (home / "state" / "defs-cache.json").read_bytes().partition(b"\n")[2]
    state = (home / "state" / "state.json").read_bytes()
    assert Store().read_defs().parsed_doc is None, "the sealed cache was not used"
    cells = [[f"l{i}", "every 1h", "active", "0/∞", "in 59m", "-"] for i in range(loops)]
    return {
        "loops": loops, "cache_bytes": len(cache), "state_bytes": len(state),
        "cached_read_defs_ms": cpu_ms(lambda: Store().read_defs(), 15),
        "read_state_ms": cpu_ms(lambda: Store().read_state(), 15),
        "mac_of_cache_ms": cpu_ms(lambda: home_key.mac(key, cache), 50),
        "mac_of_state_ms": cpu_ms(lambda: home_key.mac(key, state), 50),
        "read_key_ms": cpu_ms(lambda: home_key.load(home / "state"), 50),
        "line_over_ls_cells_ms": cpu_ms(lambda: [line(c) for row in cells for c in row], 15),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--loops", type=int, default=10000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="loopctl-bench-seal-") as root:
        for loops in (10, args.loops):
            found = measure(loops, Path(root))
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v
                              for k, v in found.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
