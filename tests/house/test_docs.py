"""Docs that cannot drift: the README's set-up commands and tour, help and a
section per command, the docs/ pages and every link between them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from conftest import TESTS
from loopctl.cli import gendocs_pages
from loopctl.cli.app import app
from loopctl.storage.definitions import TOP_KEYS

# The CLI's behaviour as a process is the subject: `start` too runs as one.
pytestmark = pytest.mark.real_processes

ROOT = TESTS.parent
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
# Every Markdown page a reader can follow a link to, and what links from it.
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted(DOCS.glob("*.md"))]
COMMANDS = typer.main.get_command(app).commands  # type: ignore[attr-defined]


def setup_commands() -> list[str]:
    section = README.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", section)


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one() -> None:
    commands = setup_commands()
    assert len(commands) == 2
    assert "pytest" in commands[1]
    assert commands[1] in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_help_and_a_section_in_the_reference(name: str) -> None:
    command = COMMANDS[name]
    assert (command.help or "").strip(), f"{name} has no help text"
    reference = (DOCS / "commands.md").read_text()
    assert f"\n## {name}\n" in reference or f"\n## {name} " in reference, \
        f"docs/commands.md has no section for {name}"


def test_help_lists_every_command_summary_whole() -> None:
    """Click cuts a summary to fit its column (`Install ... that runs...`):
    each line of `--help`'s command list ends a sentence, not mid-word."""
    from typer.testing import CliRunner

    runner = CliRunner()
    for argv in ([], ["cron"], ["notify"]):
        shown = runner.invoke(app, [*argv, "--help"], env={"COLUMNS": "80"}).output
        listed = shown.split("Options:", 1)[1].split("\n\n", 1)[1]
        assert "..." not in listed, (argv, listed)
    summary = {c.name: c.get_short_help_str(45) for c in COMMANDS.values()}
    assert summary["update"].endswith("(limits are absolute; --for counts from the start).")
    assert summary["cron"].endswith("runs `loopctl tick`.")


def test_help_groups_the_commands_define_inspect_drive_hand_off() -> None:
    """Issue 51, item 25: `loopctl --help` lists every command once, under
    its group, the groups in a person's order; a group's own help (`cron`)
    keeps one list."""
    from typer.testing import CliRunner

    shown = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "80"}).output
    heads = [h for h in re.findall(r"(?m)^(\w[\w ]*):$", shown) if h != "Commands"]
    assert heads == ["Options", "Define", "Inspect", "Drive", "Hand off"], heads
    listed = {panel: re.findall(r"(?m)^  (\w[\w-]*) ", text) for panel, text in
              re.findall(r"(?ms)^(Define|Inspect|Drive|Hand off):\n(.*?)(?:\n\n|\Z)", shown)}
    named = [name for names in listed.values() for name in names]
    assert sorted(named) == sorted(COMMANDS), \
        f"a command in no group of loopctl/cli/help_panels.PANELS: {set(COMMANDS) - set(named)}"
    assert "start" in listed["Define"] and "ls" in listed["Inspect"]
    assert "tick" in listed["Drive"] and "export" in listed["Hand off"]
    examples = shown.split("Examples", 1)[1]  # after the groups, with the shell preset first
    assert examples.index('"df -h ."') < examples.index("--agent claude")
    assert max(len(line) for line in shown.splitlines()) <= 80
    cron = CliRunner().invoke(app, ["cron", "--help"], env={"COLUMNS": "80"}).output
    assert "Commands:" in cron and "install" in cron.split("Commands:", 1)[1]


def test_the_readme_systemd_unit_can_be_enabled() -> None:
    """`systemctl --user enable` needs an [Install] section to link the unit."""
    faq = (DOCS / "faq.md").read_text()
    unit = faq.split("**How do I run the daemon under systemd?**", 1)[1]
    unit = unit.split("```ini\n", 1)[1].split("```", 1)[0]
    assert "[Install]" in unit and "WantedBy=default.target" in unit
    assert "ExecStart=" in unit and "loopctl daemon" in unit


def test_the_setup_example_leaves_no_live_loop_and_the_tour_finds_loopctl() -> None:
    """The main-job example is one command that ends with a one-off loop (a
    7-day `hello` firing every 10 minutes was left behind), and the README
    says how the tour's bare `loopctl` is found."""
    main_job = setup_commands()[0]
    assert " --max-runs 1 " in main_job and main_job.count("&&") == 4
    assert ".venv/bin/loopctl tick --wait" in main_job
    assert ". .venv/bin/activate" in README.split("## A 60-second tour", 1)[0]


def test_the_readme_is_a_front_page_that_leads_to_every_page() -> None:
    """Under 250 lines, with its contents at the top, and every page of
    docs/ and CONTRIBUTING.md one link away (issue 52, item 5)."""
    assert len(README.splitlines()) < 250
    top = README.split("\n## ", 1)[0]
    for section in re.findall(r"(?m)^## (.+)$", README):
        assert f"(#{slug(section)})" in top, f"the contents do not list {section!r}"
    linked = set(re.findall(r"\]\(((?:docs/)?[\w.-]+\.md)(?:#[\w-]*)?\)", README))
    wanted = {f"docs/{p.name}" for p in DOCS.glob("*.md") if p.name != "README.md"}
    assert wanted | {"CONTRIBUTING.md"} <= linked, sorted(wanted - linked)
    index = (DOCS / "README.md").read_text()
    assert all(f"]({name[5:]})" in index for name in wanted), "docs/README.md misses a page"


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"(?ms)^```.*?^```", "", page.read_text())
    return {slug(h) for h in re.findall(r"(?m)^#{1,4} (.+)$", text)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_its_heading(page: Path) -> None:
    """Text moved between pages keeps its links: each names a file of the
    checkout and, after `#`, a heading of that file."""
    text = re.sub(r"(?ms)^```.*?^```", "", page.read_text())
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        assert resolved.exists(), f"{page.name}: {target} leads nowhere"
        if anchor and resolved.suffix == ".md":
            assert anchor in anchors(resolved), f"{page.name}: {target}: no such heading"


def test_the_loops_yaml_reference_knows_every_top_level_key() -> None:
    assert {key for key, _, _ in gendocs_pages.TOP_LEVEL} == TOP_KEYS


def test_markdown_help_text_cannot_become_markup() -> None:
    assert gendocs_pages.md_text("PREFIX<loop>/*/x|y `a|*b*`") \
        == "PREFIX\\<loop\\>/\\*/x\\|y `a|*b*`"
    assert gendocs_pages.md_text("an odd ` tick") == "an odd \\` tick"
    assert gendocs_pages._cell("a `x|y` b|c") == "a `x\\|y` b\\|c"


def test_loops_yaml_and_its_errors_point_at_a_page_that_exists() -> None:
    """Issue 51, item 17: the header every written loops.yaml starts with,
    and the unknown-key error, name `man 5 loops.yaml`, which ships."""
    from loopctl.domain.errors import UsageError
    from loopctl.domain.model import parse_loop
    from loopctl.storage.yamlio import dump_yaml_doc

    assert "`man 5 loops.yaml`" in dump_yaml_doc({"version": 1}).splitlines()[0]
    with pytest.raises(UsageError, match="see `man 5 loops.yaml`"):
        parse_loop("a", {"command": ["true"], "every": "1h", "max_run": 3})
    assert (ROOT / "man" / "loops.yaml.5").read_text().startswith(".TH LOOPS.YAML 5 ")
