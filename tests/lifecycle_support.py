"""Helpers shared by the lifecycle tests (tests/domain/test_lifecycle_firing.py,
tests/domain/test_lifecycle_limits.py): a fake clock (fixed timestamps from T0) and a fake
process table (`alive` is a set of live pids, never a real process), and
`World`, one loop with its state that a test fires, finishes and plans passes
for.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fixed_zone import zone_of

from loopctl.domain import lifecycle
from loopctl.domain.lifecycle import RunResult
from loopctl.domain.model import LoopDef, parse_loop
from loopctl.domain.schedule import Zones
from loopctl.domain.state import LoopState, Settled

MINUTE, HOUR, DAY = 60, 3600, 86400
T0 = datetime.fromisoformat("2026-01-01T00:03:00+00:00").timestamp()
SUPERVISOR = {"pid": 4101, "ct": 1.0}
AGENT = {"pid": 4102, "ct": 2.0}


def ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def make(name: str = "job", **raw: Any) -> LoopDef:
    raw.setdefault("prompt", "p")
    if "cron" not in raw:
        raw.setdefault("every", "10m")
    return parse_loop(name, raw)


class Procs:
    """A fake process table: a ref is alive when its pid is in `live`."""

    def __init__(self, *refs: dict[str, Any]) -> None:
        self.live = {r["pid"] for r in refs}

    def __call__(self, ref: dict[str, Any] | None) -> bool:
        return bool(ref) and ref["pid"] in self.live

    def kill(self, ref: dict[str, Any]) -> None:
        self.live.discard(ref["pid"])


class World:
    """One loop, its state and the driver's view of processes."""

    def __init__(self, loop: LoopDef, now: float = T0, zones: Zones = zone_of) -> None:
        self.loop = loop
        self.zones = zones
        self.state: dict[str, Any] = {"loops": {}}
        self.procs = Procs()
        assert lifecycle.reconcile({loop.name: loop}, {}, self.state, now, zones)

    @property
    def st(self) -> LoopState:
        return self.state["loops"][self.loop.name]

    def plan(self, now: float) -> lifecycle.Pass:
        return lifecycle.plan({self.loop.name: self.loop}, {}, self.state, now, self.procs,
                              zones=self.zones)

    def fire(self, now: float) -> dict[str, Any]:
        """A driver pass that must fire; the supervisor then starts (alive)."""
        result = self.plan(now)
        assert [name for name, _ in result.fired] == [self.loop.name], result
        run = result.fired[0][1]
        run["supervisor"] = dict(SUPERVISOR)
        run["agent"] = dict(AGENT)
        self.procs.live |= {SUPERVISOR["pid"], AGENT["pid"]}
        return run

    def finish(self, now: float, outcome: str = "ok", started: float | None = None,
               decision: dict[str, Any] | None = None, **kw: Any) -> Settled:
        self.procs.live -= {SUPERVISOR["pid"], AGENT["pid"]}
        result = RunResult(outcome=outcome, exit_code=0 if outcome == "ok" else 1,
                           started_at=started if started is not None else now,
                           ended_at=now, decision=decision, **kw)
        return lifecycle.settle(self.loop, self.st, result, now, zone=self.zones(self.loop))

    def cycle(self, now: float, end: float, **kw: Any) -> Settled:
        self.fire(now)
        return self.finish(end, started=now, **kw)


def decision(kind: str, next_delay_s: float | None = None) -> dict[str, Any]:
    return {"version": 1, "decision": kind, "summary": f"{kind} summary",
            "evidence": "some evidence", "next_delay_s": next_delay_s}


def fired_names(result: lifecycle.Pass) -> list[str]:
    return [name for name, _ in result.fired]
