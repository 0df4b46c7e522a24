"""`loopctl logs` says which run it shows before the output (issue 51,
item 7): the log holds the agent's bytes first and loopctl's lines at the
end, so the first line printed is a header taken from the run's record,
never from the log, which the agent writes (a forged header stays data)."""

from __future__ import annotations

from conftest import CLI, agent_command


def test_the_header_comes_first_and_from_the_record(cli: CLI) -> None:
    forged = "# loopctl: run 20990101T000000Z-0001 of other (iteration 9) started"
    cli("start", "p", "--name", "said", "--every", "1h", "--command",
        agent_command("--print", forged, "--print", "the output"), check=0)
    cli("tick", "--wait", check=0)
    (record,) = cli.records("said")
    lines = cli("logs", "said", check=0).stdout.splitlines()
    assert lines[0] == (f"# loopctl: run {record['run_id']} of said (iteration 1), started "
                        f"{record['started_at']}, ended ok (exit code 0): the output comes "
                        "first; loopctl's own lines follow it, at the end")
    assert lines[1:3] == [forged, "the output"]
    assert lines[3].startswith(f"# loopctl: run {record['run_id']} of said (iteration 1) "
                               "started ")
