"""The parsed-definitions cache, the append path of `start`, and the state
summary: each must give exactly what a full read gives, and fall back to one
whenever the files say something else."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from fixed_zone import zone_of

from conftest import imported_modules
from loopctl import entry
from loopctl.commands import define as defining
from loopctl.storage import defs_cache, home_key
from loopctl.storage.store import Store
from loopctl.storage.yamlio import parse_yaml_text

MIXED = """\
# my loops; keep this comment
version: 1
on_attention: /bin/true
loops:
    alpha:   # four-space indent, a comment on the key
        prompt: "say hi"
        every: 10m
        command: [echo, "{prompt}"]
    broken:
        prompt: x
        every: sometimes
    beta:
        prompt: |
            two
            lines
        cron: "*/5 * * * *"
        tz: UTC
# trailing comment
"""


def write(home: Path, text: str) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    (home / "state").mkdir(mode=0o700, exist_ok=True)
    path = home / "loops.yaml"
    path.write_text(text)
    return path


def prime(store: Store | None = None):  # type: ignore[no-untyped-def]
    """Read as a driver pass does: the cache is saved with the state write."""
    store = store or Store()
    with store.lock():
        defs = store.read_defs()
        store.write_state(store.read_state())
    return defs


def same_read(a, b) -> None:  # type: ignore[no-untyped-def]
    assert a.loops == b.loops
    assert a.invalid == b.invalid
    assert a.names == b.names
    assert a.top == b.top


def test_a_cached_read_equals_a_full_read(home: Path) -> None:
    write(home, MIXED)
    Store().read_defs()
    # a read alone writes nothing (a command that then fails changes no file)
    assert not (home / "state" / "defs-cache.json").exists()
    first = prime()
    assert first.parsed_doc is not None  # no cache yet: parsed
    assert (home / "state" / "defs-cache.json").exists()
    again = Store().read_defs()
    assert again.parsed_doc is None  # from the cache
    same_read(first, again)
    assert set(again.loops) == {"alpha", "beta"} and "broken" in again.invalid
    assert again.loops["alpha"].command == ("echo", "{prompt}")
    assert again.top == {"on_attention": "/bin/true"}
    # the raw document is still there when a command needs it
    assert again.raw("beta")["tz"] == "UTC"


def test_an_edit_that_keeps_size_mtime_and_inode_is_still_seen(home: Path) -> None:
    path = write(home, MIXED)
    prime()
    st = os.stat(path)
    with open(path, "r+b") as handle:  # same inode, same length
        data = handle.read().replace(b"every: 10m", b"every: 20m")
        handle.seek(0)
        handle.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_ino == st.st_ino and os.stat(path).st_size == st.st_size
    assert Store().read_defs().loops["alpha"].every == 1200


@pytest.mark.parametrize("damage", ["garbage", "other-key", "bad-field", "symlink", "nan"])
def test_a_damaged_or_foreign_cache_is_ignored(home: Path, tmp_path: Path, damage: str) -> None:
    write(home, MIXED)
    truth = prime()
    cache = home / "state" / "defs-cache.json"
    key = home_key.load(home / "state")
    assert key is not None
    doc = json.loads(cache.read_bytes().partition(b"\n")[2])
    # Each damage is sealed with the home's own key: decoding checks too.
    if damage == "garbage":
        cache.write_bytes(defs_cache.seal(key, b"\xff{not json"))
    elif damage == "other-key":
        doc["loops"][0]["every"] = 5
        doc["key"] = "0" * 64
        cache.write_bytes(defs_cache.seal(key, json.dumps(doc).encode()))
    elif damage == "bad-field":
        doc["loops"][0]["shell_command"] = "rm -rf ~"
        cache.write_bytes(defs_cache.seal(key, json.dumps(doc).encode()))
    elif damage == "symlink":
        target = tmp_path / "elsewhere.json"
        target.write_bytes(cache.read_bytes())
        cache.unlink()
        cache.symlink_to(target)
    else:
        text = json.dumps(doc, separators=(",", ":"))
        assert '"every":600' in text
        cache.write_bytes(defs_cache.seal(key, text.replace('"every":600',
                                                            '"every":NaN').encode()))
    again = Store().read_defs()
    assert again.parsed_doc is not None, "the damaged cache was used"
    same_read(truth, again)


def test_start_appends_and_keeps_every_byte_before(home: Path) -> None:
    path = write(home, MIXED)
    store = Store()
    prime(store)  # a driver read it before: cached
    store = Store()
    before = path.read_bytes()
    defining.start(store, {"prompt": "new one", "every": "1h", "agent": "shell"}, "gamma")
    after = path.read_bytes()
    assert after.startswith(before), "start rewrote the file instead of appending"
    tail = after[len(before):].decode()
    assert tail.startswith("    gamma:\n"), tail  # at the file's own indentation
    doc = parse_yaml_text(after.decode(), "loops.yaml")
    assert list(doc["loops"]) == ["alpha", "broken", "beta", "gamma"]
    assert doc["loops"]["gamma"]["prompt"] == "new one"
    fresh = Store().read_defs()
    assert fresh.loops["gamma"].every == 3600
    assert fresh.names == ["alpha", "broken", "beta", "gamma"]
    # the cache was brought up to date (one entry spliced in), and holds
    # exactly what encoding a full parse of the new file gives
    cache = home / "state" / "defs-cache.json"
    spliced = cache.read_bytes()
    cache.unlink()
    same_read(fresh, prime())
    assert cache.read_bytes() == spliced


@pytest.mark.parametrize("ending", [
    "...\n",                                           # an explicit document end
    "on_attention: /bin/true\n",                       # loops is not the last key
])
def test_start_rewrites_when_the_end_cannot_take_an_entry(home: Path, ending: str) -> None:
    text = MIXED.replace("on_attention: /bin/true\n", "")
    path = write(home, text.replace("# trailing comment\n", ending))
    prime()
    assert (home / "state" / "defs-cache.json").exists()  # cached: the end decided
    store = Store()
    before = path.read_bytes()
    defining.start(store, {"prompt": "new one", "every": "1h", "agent": "shell"}, "gamma")
    after = path.read_bytes()
    assert not after.startswith(before)
    doc = parse_yaml_text(after.decode(), "loops.yaml")
    assert set(doc["loops"]) == {"alpha", "broken", "beta", "gamma"}
    assert list(doc)[-1] == "loops"  # written so that the next start can append


def test_flow_style_loops_are_rewritten_not_appended(home: Path) -> None:
    path = write(home, 'version: 1\nloops: {a: {prompt: x, every: 1h}}\n')
    prime()
    store = Store()
    defining.start(store, {"prompt": "y", "every": "1h", "agent": "shell"}, "b")
    doc = parse_yaml_text(path.read_text(), "loops.yaml")
    assert set(doc["loops"]) == {"a", "b"}


def test_a_hand_edited_state_is_checked_even_with_a_summary(home: Path) -> None:
    write(home, MIXED)
    store = Store()
    with store.lock():
        state = store.read_state()
        defs = store.read_defs()
        from loopctl import clock
        from loopctl.domain import lifecycle
        lifecycle.reconcile(defs.loops, defs.invalid, state, clock.now(), zone_of)
        store.write_state(state)
    assert Store().read_state() and Store().repairs == {}
    state_file = home / "state" / "state.json"
    state = json.loads(state_file.read_text())
    state["loops"]["alpha"]["iterations"] = -5
    state_file.write_text(json.dumps(state))
    reader = Store()
    again = reader.read_state()
    assert reader.repairs == {"alpha": ["iterations"]}
    assert again["loops"]["alpha"].status == "paused"


def test_tick_fast_path_ignores_a_summary_of_another_state(cli) -> None:  # type: ignore[no-untyped-def]
    cli("start", "--every", "1h", "--after", "1h", "--name", "later", "echo hi")
    cli("tick", check=0)
    summary = json.loads((cli.state_dir / "summary.json").read_text())
    assert summary["wake_at"] > time.time() + 3000
    assert entry.nothing_due() is True
    # A state.json replaced behind loopctl's back (the summary not updated)
    # that says a loop is due: the fast path must look, not trust the summary.
    state_file = cli.state_dir / "state.json"
    state = json.loads(state_file.read_text())
    state["wake_at"] = state["loops"]["later"]["next_due"] = time.time() - 5
    state_file.write_text(json.dumps(state))
    assert entry.nothing_due() is False
    assert [f["loop"] for f in cli.json("tick")["fired"]] == ["later"]


@pytest.mark.parametrize("where", ["top", "loop"])
def test_definitions_with_notification_urls_are_never_cached(home: Path, where: str) -> None:
    """The URLs hold tokens; no file but loops.yaml may hold them."""
    url = "json://user:TOKEN@localhost/x"
    text = (MIXED.replace("on_attention:", f"notify: [{url}]\non_attention:") if where == "top"
            else MIXED.replace("        tz: UTC\n", f"        tz: UTC\n        notify: {url}\n"))
    write(home, text)
    first = prime()
    assert not (home / "state" / "defs-cache.json").exists()
    assert all(b"TOKEN" not in p.read_bytes() for p in (home / "state").iterdir() if p.is_file())
    again = Store().read_defs()
    assert again.parsed_doc is not None
    same_read(first, again)


@pytest.mark.parametrize("planted", ["defs-cache.json", "summary.json"])
@pytest.mark.parametrize("kind", ["fifo", "10mib"])
def test_a_fifo_or_a_huge_file_planted_as_a_derived_file_is_ignored(
        cli, planted: str, kind: str) -> None:  # type: ignore[no-untyped-def]
    cli("start", "--every", "1h", "--after", "1h", "--name", "later", "echo hi", check=0)
    target = cli.state_dir / planted
    target.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(target)  # a reader that blocked on it would hang every command
    else:
        target.write_bytes(b"{" + b" " * (10 * 1024 * 1024))
    for args in (("tick",), ("ls",), ("status", "later", "--json")):
        proc = cli(*args, timeout=20)
        assert proc.returncode == 0, (args, proc.stderr)
    assert [loop["name"] for loop in cli.json("ls")["loops"]] == ["later"]


def test_a_fifo_planted_as_state_json_is_refused_in_one_line(cli) -> None:  # type: ignore[no-untyped-def]
    cli("start", "--every", "1h", "--name", "later", "echo hi", check=0)
    state_file = cli.state_dir / "state.json"
    state_file.unlink()
    os.mkfifo(state_file)
    for args in (("tick",), ("ls",)):
        proc = cli(*args, timeout=20)
        assert proc.returncode == 3, (args, proc.stderr)
        assert proc.stderr.count("\n") == 1 and "not a regular file" in proc.stderr


@pytest.mark.parametrize("last", ["start", "update", "rm"])
def test_a_rewrite_leaves_a_parsed_copy_for_the_next_driver(cli, last: str) -> None:  # type: ignore[no-untyped-def]
    cli("start", "p", "--every", "1h", "--name", "first", "--command", "true", check=0)
    cli("start", "p", "--every", "1h", "--name", "other", "--command", "true", check=0)
    if last == "update":
        cli("update", "first", "--max-runs", "7", check=0)
    elif last == "rm":
        cli("rm", "other", check=0)
    store = Store()
    cached = store.read_defs()
    assert cached.cache_data is not None, "no parsed copy was saved"
    source = (cli.home / "loops.yaml").read_bytes()
    full = parse_yaml_text(source.decode(), "loops.yaml")
    assert sorted(cached.loops) == sorted(full["loops"])
    assert cached.loops["first"].max_runs == (7 if last == "update" else 50)
    # The driver that reads the file next loads no YAML parser.
    modules = imported_modules("run", "first")
    assert "loopctl.storage.store" in modules
    assert not [m for m in modules if m.split(".")[0] == "yaml"]


def read_alpha_every(version: str | None) -> tuple[int, bool]:
    """`alpha`'s `every` and whether loops.yaml was parsed, as read by a fresh
    loopctl process whose `__version__` is `version` (None: this one's)."""
    import subprocess
    import sys

    code = ("import loopctl, sys\n"
            "if sys.argv[1]: loopctl.__version__ = sys.argv[1]\n"
            "from loopctl.storage.store import Store\n"
            "defs = Store().read_defs()\n"
            "print(defs.loops['alpha'].every, defs.parsed_doc is not None)\n")
    proc = subprocess.run([sys.executable, "-c", code, version or ""], capture_output=True,
                          text=True, timeout=60, check=True)
    every, parsed = proc.stdout.split()
    return int(every), parsed == "True"


def test_a_cache_made_by_another_loopctl_version_is_not_used(home: Path) -> None:
    """The key holds the version: a release that parses a field differently
    never reuses what an older one cached. A cache that claims this file's
    key but says `every: 5` shows which read was used."""
    write(home, MIXED)
    prime()
    cache = home / "state" / "defs-cache.json"
    key = home_key.load(home / "state")
    assert key is not None
    payload = defs_cache.unseal(key, cache.read_bytes())
    assert payload is not None
    doc = json.loads(payload)
    assert doc["loops"][0]["every"] == 600
    doc["loops"][0]["every"] = 5
    # Sealed with the home's key, as loopctl seals: only the version differs.
    cache.write_bytes(defs_cache.seal(key, json.dumps(doc, separators=(",", ":")).encode()))
    assert read_alpha_every(None) == (5, False)  # the control: this version trusts its cache
    assert read_alpha_every("0.0.0+another") == (600, True)


# -- issue 25, item 10: a derived file never widens what runs ---------------------------


def plant_cache(cli, payload: bytes, key: bytes | None) -> None:  # type: ignore[no-untyped-def]
    cache = cli.state_dir / "defs-cache.json"
    cache.write_bytes(payload if key is None else defs_cache.seal(key, payload))


@pytest.mark.parametrize("seal", ["none", "another-homes-key", "truncated-mac"])
def test_a_planted_cache_with_the_right_hash_runs_nothing_loops_yaml_does_not_say(
        cli, tmp_path: Path, seal: str) -> None:  # type: ignore[no-untyped-def]
    from conftest import agent_command

    record, pwned = tmp_path / "record.jsonl", tmp_path / "PWNED"
    cli("start", "p", "--name", "x", "--every", "1h", "--command",
        agent_command("--record", str(record)), check=0)
    cli("run", "x", check=0)  # the first run; the cache is written with the state
    sealed = (cli.state_dir / "defs-cache.json").read_bytes()
    doc = json.loads(sealed.partition(b"\n")[2])
    # Everything a planter can know: the hash of loops.yaml is no secret.
    assert doc["key"] == defs_cache.digest((cli.home / "loops.yaml").read_bytes())
    doc["loops"][0]["command"] = [sys.executable, "-c", f"open({str(pwned)!r}, 'w')"]
    payload = json.dumps(doc).encode()
    key = {"none": None, "another-homes-key": os.urandom(32), "truncated-mac": b""}[seal]
    if seal == "truncated-mac":
        plant_cache(cli, defs_cache.seal(os.urandom(32), payload)[:32] + b"\n" + payload, None)
    else:
        plant_cache(cli, payload, key)
    shown = cli.json("show", "x")
    assert "PWNED" not in json.dumps(shown)
    assert "PWNED" not in json.dumps(cli.json("ls"))
    cli("run", "x", check=0)  # reads the definitions as tick does, without waiting an hour
    assert not pwned.exists(), "a planted cache chose the command"
    assert len(record.read_text().splitlines()) == 2  # the real command ran, twice


def test_a_planted_summary_cannot_skip_the_state_checks(cli) -> None:  # type: ignore[no-untyped-def]
    """summary.json said "state.json is as loopctl wrote it" by naming its
    hash, which anyone can compute: a planted state with a flag-shaped
    session id (it would reach the agent's argv) then skipped every check."""
    import hashlib

    cli("start", "p", "--name", "x", "--every", "1h", "--after", "1h", "--command", "true",
        check=0)
    cli("tick", check=0)  # nothing due: no run can rewrite the state under the test
    state_file, summary_file = cli.state_dir / "state.json", cli.state_dir / "summary.json"
    state = json.loads(state_file.read_text())
    state["loops"]["x"]["session_id"] = "--dangerously-skip-permissions"
    data = json.dumps(state).encode()
    state_file.write_bytes(data)
    summary = json.loads(summary_file.read_text())
    st = os.stat(state_file)
    summary.update(state_sha=hashlib.sha256(data).hexdigest(),
                   state_mac=home_key.mac(os.urandom(32), data),
                   state_sig=[st.st_mtime_ns, st.st_size, st.st_ino])
    summary_file.write_text(json.dumps(summary))
    store = Store()
    read = store.read_state()
    assert store.repairs == {"x": ["session_id"]}
    assert read["loops"]["x"].session_id is None


def test_the_home_key_is_private_and_one_that_is_not_is_not_used(cli) -> None:  # type: ignore[no-untyped-def]
    cli("start", "p", "--name", "x", "--every", "1h", "--after", "1h", "--command", "true",
        check=0)
    cli("tick", check=0)
    key_file = cli.state_dir / "home.key"
    assert key_file.stat().st_mode & 0o777 == 0o600 and key_file.stat().st_size == 32
    assert Store().read_defs().parsed_doc is None  # sealed under it: used
    key_file.chmod(0o644)  # readable by others: anyone could seal with it
    assert home_key.load(cli.state_dir) is None
    assert Store().read_defs().parsed_doc is not None
    doctor = cli("doctor").stdout
    assert "home.key is not a private 32-byte file" in doctor, doctor
    key_file.unlink()
    key_file.symlink_to(cli.home / "loops.yaml")
    assert home_key.load(cli.state_dir, create=True) is None
