"""`--budget-usd` on a loop whose agent reports no cost (DESIGN §18): say so
at `start` and `update`, where the cap is set."""

from __future__ import annotations

import sys

from loopctl.domain.model import LoopDef


def warn_uncounted_budget(loop: LoopDef | None) -> None:
    """A budget only estimates can reach: the cap counts a run's estimate
    (the most a run of the loop has cost), and nothing here reports one."""
    from loopctl.agents.presets import REPORTS_COST, reports_cost

    if loop is None or loop.budget_usd is None or reports_cost(loop):
        return
    what = "a --command loop" if loop.command else f"the {loop.agent or 'shell'} preset"
    print(f"warning: --budget-usd: {what} reports no cost, so this cap can only count "
          f"estimates and may never be reached; presets that report cost: "
          f"{', '.join(REPORTS_COST)}", file=sys.stderr)
