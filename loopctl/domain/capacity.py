"""How many runs may be in flight at once (DESIGN §18). Pure: liveness
arrives as a callback, like in `lifecycle`.

`max_concurrent: N` at the top of `loops.yaml` bounds the runs in flight
across the home's loops (0: unlimited); `max_concurrent_per_agent: {PRESET:
N}` bounds one preset's. What is in flight is read from state.json (each
claimed run with a live supervisor, each orphaned agent still alive), never
from a driver's memory, so a cron `tick` and a daemon count the same runs;
drivers count under the store lock that also claims. A fire beyond a cap is
queued: the loop stays due, `queued_at` remembers since when, and the oldest
due fires first when a slot frees. A run whose supervisor died stops
counting at once: the pass that counts is the one that records it lost.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from loopctl.domain.errors import UsageError
from loopctl.domain.model import PRESETS, LoopDef
from loopctl.domain.untrusted import shorten
from loopctl.fast.data_class import factory, record

# Measured on 2 cores with the real agent CLIs (bench/agents_load.py,
# bench/README.md "Concurrency cap"): four agents are about 1 GB resident and
# the start-up burst of the heaviest (gemini, 2.3 s of CPU each) clears in
# seconds; sixteen are 3-4 GB and a command typed meanwhile takes 11x longer.
DEFAULT_MAX_CONCURRENT = 4
LIMIT = 1000  # a cap above this is a typo, not a plan
KEYS = ("max_concurrent", "max_concurrent_per_agent")
ALL = "*"  # the key under which `Counter`s hold the total

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

    from loopctl.domain.state import LoopState

    Alive = Callable[[Any], bool]


@record(frozen=True)
class Caps:
    total: int = DEFAULT_MAX_CONCURRENT  # 0: unlimited
    per_agent: dict[str, int] = factory(dict)

    def describe(self) -> str:
        text = f"max_concurrent {self.total or 'unlimited'}"
        if self.total == DEFAULT_MAX_CONCURRENT:
            text += " (the default)"
        if self.per_agent:
            text += "; per agent " + ", ".join(f"{k} {v or 'unlimited'}"
                                               for k, v in sorted(self.per_agent.items()))
        return text


def check_count(value: Any, key: str) -> int:
    """A whole number 0..LIMIT, or one line naming `key`. YAML gives `1e9`
    as text and `.nan` as a float (not a whole one, nor is `.inf`); `true`
    is a bool, which is an int in Python and is refused here too."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or isinstance(value, float) and not value.is_integer() \
            or not 0 <= value <= LIMIT:
        raise UsageError(f"top level: {key!r} must be a whole number from 0 (unlimited) to "
                         f"{LIMIT}, got {shorten(value, 40)}")
    return int(value)


def check_caps(top: dict[str, Any]) -> Caps:
    """The caps a document's top level sets; UsageError names the key."""
    total = top.get("max_concurrent")
    total = DEFAULT_MAX_CONCURRENT if total is None else check_count(total, "max_concurrent")
    raw = top.get("max_concurrent_per_agent")
    if raw is None:
        return Caps(total)
    if not isinstance(raw, dict):
        raise UsageError("top level: 'max_concurrent_per_agent' must be a mapping of agent "
                         f"presets to whole numbers, like {{claude: 2}}; got "
                         f"{type(raw).__name__}")
    per_agent = {}
    for name, value in raw.items():
        if name not in PRESETS:
            raise UsageError(f"top level: 'max_concurrent_per_agent' names "
                             f"{shorten(name, 40)}, which is not an agent preset; "
                             f"expected one of {', '.join(PRESETS)}")
        per_agent[name] = check_count(value, f"max_concurrent_per_agent.{name}")
    return Caps(total, per_agent)


def caps_of(top: dict[str, Any]) -> Caps:
    """The caps of a `Definitions.top`, checked when the file was read."""
    return Caps(top.get("max_concurrent", DEFAULT_MAX_CONCURRENT),
                dict(top.get("max_concurrent_per_agent") or {}))


def agent_of(loop: LoopDef | None, run: dict[str, Any] | None = None) -> str | None:
    """The preset a run uses (None: a `command` loop, bounded only by the
    total). The run's own copy of its definition wins: the loop may have
    been edited since it was claimed."""
    spec = (run or {}).get("spec")
    if isinstance(spec, dict) and ("agent" in spec or "command" in spec):
        agent = spec.get("agent")
        return agent if isinstance(agent, str) else None if spec.get("command") else "shell"
    return loop.agent if loop is not None else None


def in_flight(entries: dict[str, LoopState], loops: dict[str, LoopDef],
              alive: Alive) -> Counter[str]:
    """Runs in flight now, in total (key ALL) and per preset."""
    busy: Counter[str] = Counter()
    for name, st in entries.items():
        run = st.run
        if run and alive(run.get("supervisor")) or st.orphan and alive(st.orphan):
            busy[ALL] += 1
            agent = agent_of(loops.get(name), run)
            if agent is not None:
                busy[agent] += 1
    return busy


def admit(due: Iterable[tuple[str, float, str | None]], busy: Counter[str],
          caps: Caps) -> tuple[list[str], list[str]]:
    """Which of the due loops (name, due time, preset) start now and which
    wait: oldest due first; a loop whose preset is at its own cap waits
    without holding back loops of other presets. `busy` is updated."""
    started, waiting = [], []
    for name, _, agent in sorted(due, key=lambda d: (d[1], d[0])):
        if full(caps, busy, agent) is None:
            busy[ALL] += 1
            if agent is not None:
                busy[agent] += 1
            started.append(name)
        else:
            waiting.append(name)
    return started, waiting


def full(caps: Caps, busy: Counter[str], agent: str | None) -> str | None:
    """Why one more run of `agent` may not start now (None: it may)."""
    if caps.total and busy[ALL] >= caps.total:
        return f"{busy[ALL]} of max_concurrent {caps.total} runs are in flight"
    limit = caps.per_agent.get(agent or "", 0)
    if limit and busy[agent or ""] >= limit:
        return f"{busy[agent or '']} of max_concurrent_per_agent.{agent} {limit} runs " \
               "are in flight"
    return None
