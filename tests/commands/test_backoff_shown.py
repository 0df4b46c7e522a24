"""After a failure an interval loop waits longer (x2 per failure in a row,
capped at x8): `status` says so beside the next fire, and says nothing of a
backoff for a cron loop, which keeps its slots."""

from __future__ import annotations

from conftest import CLI, agent_command


def _next_fire_line(cli: CLI, name: str) -> str:
    said = cli("status", name, check=0).stdout
    return next(text for text in said.splitlines() if text.strip().startswith("next fire"))


def test_the_next_fire_after_a_failure_names_the_backoff(cli: CLI) -> None:
    cli("start", "p", "--name", "w", "--every", "10m", "--command",
        agent_command("--exit", "3"), check=0)
    assert "backoff" not in _next_fire_line(cli, "w")
    cli("run", "w", check=1)
    assert _next_fire_line(cli, "w").endswith("(backoff x2 after 1 failure)")


def test_a_cron_loop_has_no_backoff_to_show(cli: CLI) -> None:
    cli("start", "p", "--name", "c", "--cron", "0 3 * * *", "--command",
        agent_command("--exit", "3"), check=0)
    cli("run", "c", check=1)
    assert "backoff" not in _next_fire_line(cli, "c")
