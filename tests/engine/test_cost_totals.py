"""A total cost (issue 51 item 13): `history` has a COST column and a total
line, `digest` a total line across loops; a cost that is not a finite,
non-negative number counts as none."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import CLI


def set_costs(cli: CLI, name: str, costs: list[object]) -> None:
    folder = cli.state_dir / "runs" / name
    files = sorted(p for p in folder.glob("*.json") if not p.name.endswith(".decision.json"))
    for path, cost in zip(files, costs, strict=True):
        record = json.loads(path.read_text())
        record["cost_usd"] = cost
        path.write_text(json.dumps(record))


def test_history_and_digest_total_the_cost(cli: CLI, tmp_path: Path) -> None:
    for name in ("a", "b"):
        cli("start", "--name", name, "--every", "1h", "--cwd", str(tmp_path), "true", check=0)
    for name in ("a", "a", "a", "b"):
        cli("run", name, check=0)
    set_costs(cli, "a", [0.25, 0.5, "NaN"])
    set_costs(cli, "b", [1.0])
    history = cli("history", "a", env={"COLUMNS": "200"}).stdout
    header, *rows = history.splitlines()
    assert "COST" in header, history
    assert "$0.25" in rows[0] and "$0.50" in rows[1], history
    assert "total: $0.75 over 3 run(s) shown" in history, history
    digest = cli("digest", "--since", "1h").stdout
    assert "Total: 4 run(s), $1.75 across 2 loop(s)" in digest, digest
    assert cli.json("digest", "--since", "1h")["total"] == {"runs": 4, "cost_usd": 1.75}
    cli("start", "--name", "c", "--every", "1h", "--cwd", str(tmp_path), "true", check=0)
    cli("run", "c", check=0)
    assert "COST" not in cli("history", "c").stdout  # no cost read: no column
