"""`ls --status S` shows only the loops `ls` shows as S; `--sort next|last|name`
orders the rows (table and --json alike); a bad value is one line, exit 2."""

from __future__ import annotations

from conftest import CLI, agent_command


def names(text: str) -> list[str]:
    return [row.split()[0] for row in text.splitlines()[1:]]


def test_ls_picks_by_status_and_orders_by_next_last_or_name(cli: CLI) -> None:
    cli("start", "p", "--name", "zeta", "--every", "1h", "--after", "5m", check=0)
    cli("start", "p", "--name", "alpha", "--every", "1h", "--after", "2h", check=0)
    cli("start", "p", "--name", "mid", "--every", "1h", "--command",
        agent_command("--exit", "3"), check=0)
    cli("run", "mid", check=1)
    cli("start", "p", "--name", "held", "--every", "1h", check=0)
    cli("pause", "held", check=0)
    assert names(cli("ls", "--status", "paused", check=0).stdout) == ["held"]
    assert names(cli("ls", "--sort", "name", check=0).stdout) == ["alpha", "held", "mid", "zeta"]
    soonest = names(cli("ls", "--sort", "next", check=0).stdout)
    assert soonest[0] == "zeta" and soonest.index("zeta") < soonest.index("alpha")
    assert soonest[-1] == "held"  # no next fire
    assert names(cli("ls", "--sort", "last", check=0).stdout)[0] == "mid"  # the only run
    listed = cli.json("ls", "--status", "active", "--sort", "name")["loops"]
    assert [loop["name"] for loop in listed] == ["alpha", "mid", "zeta"]
    assert cli("ls", "--status", "completed", check=0).stdout.strip() == "no completed loops"
    bad = cli("ls", "--status", "broken", check=2)
    assert bad.stderr.count("\n") == 1 and "paused" in bad.stderr
    cli("ls", "--sort", "age", check=2)
