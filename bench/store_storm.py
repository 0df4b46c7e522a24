"""The kill storm of tests/store/test_kill_storm.py, for minutes (issue 54:
"drivers on three machines racing for minutes with kill storms"): three
homes in their own pid namespaces race daemons and ticks for two loops on a
team store while supervisors and drivers are SIGKILLed at random; then every
machine dies, the team settles, and every property is checked from the
store, the machines' records and the bodies' marks (tests/store/storm.py).

    python bench/store_storm.py [--minutes 5] [--seed N]

Prints what the storm did and each broken property (none: PASS).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from _common import header, result

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.modules.pop("store", None)  # tests/store, not bench/store.py

RENEW, STALE = 0.5, 3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=5)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    header(f"team store: a kill storm for {args.minutes:g} minutes")
    from store.pg_cluster import pg_bin_dir, start_cluster
    from store.storm import Storm, check, summary

    bin_dir = pg_bin_dir()
    if bin_dir is None:
        sys.exit("PostgreSQL (initdb, pg_ctl) is not installed")
    os.environ.update(LOOPCTL_STORE_RENEW=str(RENEW), LOOPCTL_STORE_STALE=str(STALE))
    cluster = start_cluster(bin_dir)
    try:
        with tempfile.TemporaryDirectory(prefix="loopctl-bench-storm-") as tmp:
            storm = Storm(Path(tmp), cluster.dsn(cluster.new_database()))
            storm.setup()
            storm.start()
            try:
                storm.rage(args.minutes * 60, seed=args.seed)
            finally:
                storm.stop()
            storm.settle(STALE)
            broken, did = check(storm), summary(storm)
    finally:
        cluster.stop("immediate")
    print(f"   {did}")
    for line in broken:
        print(f"   BROKEN: {line}")
    result("store_kill_storm", f"{len(broken)} broken properties over {did['claims']} claims, "
           f"{did['lost']} lost", "0", not broken, **did)


if __name__ == "__main__":
    main()
