"""A row's context rule that reads the machine (`context`, checked by
integrations/context_rules.py): the worktree's `git_repository`, said in
the words of the route that gave the setting."""

from __future__ import annotations

import json
from pathlib import Path

from commands.test_screens_say_what_to_do import make_repo
from conftest import CLI


def test_a_worktree_loop_outside_git_is_refused_by_start_and_named_by_validate(
        cli: CLI, home: Path, tmp_path: Path) -> None:
    plain, repo = tmp_path / "plain", make_repo(tmp_path)
    plain.mkdir()
    refused = cli("start", "p", "--name", "w", "--every", "1h", "--cwd", str(plain),
                  "--worktree")
    assert refused.returncode == 2
    assert refused.stderr.strip().endswith(f"--worktree: {plain} is not in a git repository")
    cli("start", "p", "--name", "w", "--every", "1h", "--cwd", str(repo), "--worktree",
        check=0)
    assert cli.json("validate", "--json")["warnings"] == []  # in a repository: holds

    loops = home / "loops.yaml"  # a hand edit moves it out of any repository
    loops.write_text(loops.read_text().replace(f"cwd: {repo}", f"cwd: {plain}"))
    checked = cli("validate", "--json")
    assert checked.returncode == 0, checked.stderr  # valid: the machine, not the file
    assert json.loads(checked.stdout)["warnings"] == [
        f"loop 'w': 'worktree': {plain} is not in a git repository"]
