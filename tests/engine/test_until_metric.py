"""`--until-metric N` / `until_metric:` (an example of a setting with a
context rule added as one row plus its behaviour): a passing check whose
metric reaches N completes the loop; it means nothing without a metric."""

from __future__ import annotations

from pathlib import Path

from conftest import CLI


def test_a_passing_check_whose_metric_reaches_n_completes_the_loop(cli: CLI,
                                                                  tmp_path: Path) -> None:
    for name, score in (("done", 90), ("more", 70)):
        cli("start", "p", "--name", name, "--every", "1h", "--cwd", str(tmp_path),
            "--command", "true", "--check", f"echo cov {score}",
            "--check-metric", r"cov ([0-9]+)", "--until-metric", "80", check=0)
        cli("run", name, check=0)
    assert cli.json("status", "done")["status"] == "completed"
    assert cli.json("status", "more")["status"] == "active"


def test_until_metric_needs_a_metric_from_both_routes(cli: CLI, home: Path) -> None:
    bad = cli("start", "p", "--name", "m", "--every", "1h", "--check", "true",
              "--until-metric", "5")
    assert bad.returncode == 2 and "--until-metric needs --check-metric" in bad.stderr
    cli("start", "p", "--name", "m", "--every", "1h", "--command", "true", check=0)
    loops = home / "loops.yaml"
    loops.write_text(loops.read_text().replace("    cwd:", "    until_metric: 5\n    cwd:"))
    assert "'until_metric' needs 'check_metric'" in cli("validate").stdout
