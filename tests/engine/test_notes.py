"""`--notes` and `loopctl notes` (DESIGN §16): a notes file kept across runs,
handed to the agent at $LOOPCTL_NOTES_FILE (confined, when the kernel has
Landlock), read back bounded and never through what the agent planted there.
The notes are data: never a path, an argument or a placeholder."""

from __future__ import annotations

import shlex
from pathlib import Path

from conftest import CLI
from loopctl.engine.containment import landlock

try:
    SANDBOX = "on" if landlock.abi() else "off"
except landlock.LandlockError:
    SANDBOX = "off"

PAYLOAD = "{prompt} {run_id} --flag ../x \x1b[2J\u202eevil\u202c\n"
AGENT = r"""
cat "$LOOPCTL_NOTES_FILE" > "seen-$LOOPCTL_ITERATION"
case "$LOOPCTL_ITERATION" in
1|2) cat payload >> "$LOOPCTL_NOTES_FILE" ;;
3) rm "$LOOPCTL_NOTES_FILE"; ln -s "$PWD/secret" "$LOOPCTL_NOTES_FILE" ;;
4) rm "$LOOPCTL_NOTES_FILE"; mkfifo "$LOOPCTL_NOTES_FILE" ;;
5) head -c 10485760 /dev/zero | tr '\0' n > "$LOOPCTL_NOTES_FILE" ;;
6) printf 'ok\377\n' > "$LOOPCTL_NOTES_FILE" ;;
esac
"""


def test_notes_carry_over_bounded_and_never_followed(cli: CLI, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "payload").write_text(PAYLOAD)
    (work / "secret").write_text("TOKEN=hunter2\n")
    cli("start", "keep notes", "--name", "nt", "--on-demand", "--cwd", str(work), "--notes",
        "--sandbox", SANDBOX, "--command", shlex.join(["sh", "-c", AGENT]), check=0)
    assert cli.json("show", "nt")["definition"]["notes"] is True
    assert cli.json("status", "nt")["notes"] is True
    records = []
    for _ in range(6):
        cli("run", "nt", check=0)
        records.append(cli.records("nt")[-1])
    assert [r["outcome"] for r in records] == ["ok"] * 6, records
    assert records[0]["sandbox"].startswith("landlock") == (SANDBOX == "on")
    assert (work / "seen-1").read_text() == "" and (work / "seen-2").read_text() == PAYLOAD
    assert (work / "seen-3").read_text() == PAYLOAD * 2
    # Data only: the argv never changed, no `../x` was made, nothing was filled in.
    assert all(r["argv"] == records[0]["argv"] for r in records)
    assert not (tmp_path / "x").exists() and not (work / "x").exists()
    # A symlink, a FIFO: not followed, not read; the notes stay as they were.
    assert "notes file unreadable" in records[2]["note"]
    assert "not a regular file" in records[3]["note"]
    assert (work / "seen-4").read_text() == (work / "seen-5").read_text() == PAYLOAD * 2
    assert "TOKEN" not in (work / "seen-5").read_text()
    assert "notes cut to 64 KiB (the agent left 10485760 bytes)" in records[4]["note"]
    assert (work / "seen-6").read_text() == "n" * 65536
    assert "invalid UTF-8" in records[5]["note"]
    shown = cli("notes", "nt", check=0)
    assert shown.stdout == "ok\ufffd\n"
    cli("run", "nt", check=0)  # leaves them as they are
    (work / "payload").write_text(PAYLOAD)
    state_notes = cli.state_dir / "notes" / "nt.md"
    state_notes.write_text(PAYLOAD)
    text = cli("notes", "nt", check=0).stdout
    assert "\x1b" not in text and "\u202e" not in text and "{prompt} {run_id} --flag" in text
    assert cli.json("notes", "nt")["notes"] == PAYLOAD
    assert cli("notes", "nt", "--clear", check=0).stdout.startswith("cleared")
    assert cli.json("notes", "nt") == {"version": 1, "loop": "nt", "notes": "", "bytes": 0,
                                       "enabled": True, "cleared": False}
    state_notes.write_text("left over")
    cli("rm", "nt", check=0)
    assert not state_notes.exists()
    assert cli("notes", "nt").returncode == 4


def test_notes_options_in_update_and_start(cli: CLI, tmp_path: Path) -> None:
    cli("start", "x", "--name", "u", "--every", "1h", check=0)
    cli("update", "u", "--notes", check=0)
    assert cli.json("show", "u")["definition"]["notes"] is True
    cli("update", "u", "--no-notes", check=0)
    assert "notes" not in cli.json("show", "u")["definition"]
    assert "keeps none" in cli("notes", "u", check=0).stderr
    bad = cli("update", "u", "--fix-attempts", "2")
    assert bad.returncode == 2 and "needs" in bad.stderr and "Traceback" not in bad.stderr
    over = cli("start", "x", "--name", "v", "--every", "1h", "--fix-attempts", "101")
    assert over.returncode == 2 and "Traceback" not in over.stderr
    assert cli("show", "v").returncode == 4


def test_notes_cleared_during_a_run_are_not_overwritten(cli: CLI, tmp_path: Path) -> None:
    agent = 'loopctl notes mid --clear; echo "from the run" >> "$LOOPCTL_NOTES_FILE"'
    cli("start", "x", "--name", "mid", "--on-demand", "--cwd", str(tmp_path), "--notes",
        "--sandbox", "off", "--command", shlex.join(["sh", "-c", agent]), check=0)
    kept = cli.state_dir / "notes" / "mid.md"
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text("old notes\n")
    cli("run", "mid", check=0)
    record = cli.records("mid")[-1]
    assert "the run's notes were not kept" in record["note"]
    assert not kept.exists()  # as `--clear` left it
    cli("run", "mid", check=0)  # cleared again, but this time nothing was there to change
    assert kept.read_text() == "from the run\n"
