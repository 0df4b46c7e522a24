"""`loopctl --help` lists its commands in four groups, in the order a person
meets them: define a loop, inspect it, drive it, hand it off. Each command's
group is its Typer `rich_help_panel`, which Typer itself shows only with rich
markup (off here, for speed and plain text); this group class shows the
panels in Click's plain help as sections of their own.
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperGroup

# The panels in the order `--help` shows them, and each command's panel.
PANELS = {
    "Define": ("start", "update", "show", "validate", "rm"),
    "Inspect": ("watch", "ls", "list", "status", "logs", "history", "events", "notes",
                "digest", "doctor", "agents"),
    "Drive": ("run", "trigger", "tick", "daemon", "serve", "cron", "store", "pause",
              "resume", "stop", "decide"),
    "Hand off": ("export", "notify", "completion"),
}
PANEL_OF = {name: panel for panel, names in PANELS.items() for name in names}


class PanelGroup(TyperGroup):
    """A group whose commands' help is listed under their panels (commands
    without one, as in `cron --help`, under "Commands")."""

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        commands = [(name, cmd) for name in self.list_commands(ctx)
                    if (cmd := self.get_command(ctx, name)) is not None and not cmd.hidden]
        if not commands:
            return
        limit = formatter.width - 6 - max(len(name) for name, _ in commands)
        order = [*PANELS, "Commands"]
        for panel in order:
            rows = [(name, cmd.get_short_help_str(limit)) for name, cmd in commands
                    if (getattr(cmd, "rich_help_panel", None) or "Commands") == panel]
            if rows:
                with formatter.section(panel):
                    formatter.write_dl(rows)
