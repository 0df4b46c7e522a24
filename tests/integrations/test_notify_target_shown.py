"""A notification target is shown so that its owner can tell which one it
is (the scheme and a machine's host name) and nothing that lets anyone post
to it (user, password, port, path, query; a host that is a topic)."""

from __future__ import annotations

import pytest

from conftest import CLI
from loopctl.domain.untrusted import where


@pytest.mark.parametrize(("url", "shown"), [
    ("https://user:pw@hooks.example.com:8443/secret/tok123?k=v", "https://hooks.example.com/****"),
    ("json://localhost:8080/hook", "json://localhost/****"),
    ("ntfy://ntfy.sh/my-topic", "ntfy://ntfy.sh/****"),
    ("ntfy://my-topic", "ntfy://****"),        # the host is the topic: the secret
    ("slack://T000/B000/XXXX", "slack://****"),  # the team id is part of the token
    ("not a url", "****"),
])
def test_where_keeps_the_host_and_hides_the_rest(url: str, shown: str) -> None:
    assert where(url) == shown


@pytest.mark.parametrize("url", [
    "json://ex\u202eample.com/hook",      # a bidi override would reorder what is shown
    "json://ex\x1b[2Jample.com/hook",     # an escape sequence would reach the terminal
    "json://" + "a." * 5000 + "com/hook",  # 10 KB of host: no machine's name
    "json://%2e%2e.example.com/hook",     # encoded text is not a name either
    "json://[::1]:8080/hook",
], ids=["bidi", "escape", "huge", "encoded", "ipv6"])
def test_a_host_that_is_no_plain_machine_name_stays_masked(url: str) -> None:
    assert where(url) == "json://****"


def test_a_bad_notify_url_names_its_host_not_its_secrets(cli: CLI) -> None:
    proc = cli("start", "p", "--name", "n", "--every", "1h", "--command", "true",
               "--notify", "https://user:pw@hooks.example.com/secret/tok123")
    assert proc.returncode == 2
    assert "bad --notify https://hooks.example.com/****:" in proc.stderr
    assert not any(piece in proc.stderr for piece in ("user", ":pw", "secret", "tok123"))


def test_a_bare_word_in_start_notify_is_a_target_name(cli: CLI) -> None:
    unknown = cli("start", "p", "--name", "n", "--every", "1h", "--command", "true",
                  "--notify", "me")
    assert unknown.returncode == 2 and "unknown notification target 'me'" in unknown.stderr
    yaml = cli.home / "loops.yaml"
    yaml.parent.mkdir(parents=True, exist_ok=True)
    yaml.write_text("version: 1\nloops: {}\nnotify_targets:\n  me: json://localhost:9/x\n")
    cli("start", "p", "--name", "n", "--every", "1h", "--command", "true",
        "--notify", "me", check=0)
    assert cli.json("show", "n", "--reveal")["definition"]["notify"] == ["json://localhost:9/x"]
    other = cli("update", "n", "--notify", "nope")
    assert other.returncode == 2 and "(me)" in other.stderr
