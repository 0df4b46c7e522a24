"""What a confined run may touch (DESIGN §14): pure rules, no I/O.

`policy` turns what the engine found on disk (the run's folders, the program
directories on its PATH, loopctl's installation) into a `Policy`: the paths
it may write and the paths it may only read. Everything else is denied by
the kernel, the user's home included. `mode_for` says whether a loop is
confined at all.
"""

from __future__ import annotations

import posixpath

from loopctl.fast.data_class import record

MODES = ("auto", "on", "off")

# Writable for every confined run: tool caches (pip, uv, node-gyp, ...) and
# npm's cache, which `npx` and every npm-installed CLI use.
COMMON_WRITE = ("~/.cache", "~/.npm")
# Readable for every confined run: who the user is to git (user.name) and its
# ignore rules. Not ~/.git-credentials, not ~/.config/git/credentials.
COMMON_READ = ("~/.gitconfig", "~/.config/git/config", "~/.config/git/ignore")

# Each preset's own state, which the real CLI writes on every run (its
# config, session transcripts, auth tokens it refreshes). Checked with the
# real CLIs confined (tests/e2e/test_*.py, `--sandbox on`).
PRESET_WRITE: dict[str, tuple[str, ...]] = {
    # ~/.claude: settings, sessions (projects/), todos, shell snapshots, the
    # OAuth credentials it refreshes; ~/.claude.json: its one config file,
    # rewritten in place on every start (startup count, project trust).
    "claude": ("~/.claude", "~/.claude.json", "~/.claude.json.backup"),
    # config.toml, auth.json, sessions/ (rollouts), log/, the sqlite state db.
    "codex": ("~/.codex",),
    # settings.json, tmp/<project>/ chats and logs, oauth_creds.json.
    "gemini": ("~/.gemini",),
    # settings.json, tmp/ chats and logs, its OAuth tokens.
    "qwen": ("~/.qwen",),
    # data/ (sessions, its sqlite db, logs), config, the model list cache,
    # and state/ (its TUI prompt history, kept even in `run`).
    "opencode": ("~/.local/share/opencode", "~/.config/opencode", "~/.cache/opencode",
                 "~/.local/state/opencode"),
    "aider": ("~/.aider",),
    "goose": ("~/.config/goose", "~/.local/share/goose", "~/.local/state/goose"),
    "pi": ("~/.pi",),
    "cursor": ("~/.cursor", "~/.config/cursor"),
    "copilot": ("~/.copilot",),
    "crush": ("~/.config/crush", "~/.local/share/crush"),
    "amp": ("~/.config/amp", "~/.local/share/amp", "~/.amp"),
    "shell": (),
}

# Outside the home: what every program needs to start and run. /tmp is not
# here (the run gets a private TMPDIR), nor /home, /root, /var or /srv.
SYSTEM_READ = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
               "/opt", "/proc", "/sys", "/run", "/nix/store", "/snap")
# Devices a program may open for writing; /dev itself is only listable.
# Not /dev/pts (every terminal of the machine) nor /dev/shm (shared by every
# process): a run gets its own of each where it can (engine/containment/privdev.py).
# /dev/tty names only the opener's controlling terminal, and a run, in a
# session of its own with no terminal on its stdio, has none.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom",
           "/dev/tty", "/dev/ptmx")
# /dev/fd and /dev/std* are links into /proc/self/fd: what they reopen is
# checked as itself (a pipe is always allowed, a file by its own path).
DEVICE_DIRS: tuple[str, ...] = ()


@record(frozen=True)
class Policy:
    writable: tuple[str, ...]
    readable: tuple[str, ...]
    devices: tuple[str, ...]
    # Only their listing (not their files): the folder that holds loopctl's
    # package, whose import system lists it to find `loopctl`.
    listable: tuple[str, ...]
    # Private to the run: the supervisor makes it and removes it after.
    tmpdir: str
    # Granted only if every component is a real folder (the last one a real
    # folder or file): what an agent's earlier run could have turned into
    # a link (a preset's folder in a writable ~/.cache, a --sandbox-write
    # path, the recorded repository).
    checked: tuple[str, ...] = ()


@record(frozen=True)
class Inputs:
    """What the engine found for one run; every path absolute and resolved."""
    preset: str
    home: str
    cwd: str
    tmpdir: str
    decision_dir: str
    repo: tuple[str, ...] = ()  # the repository's root and git dirs, read only
    programs: tuple[str, ...] = ()  # PATH entries, interpreters, loopctl
    files: tuple[str, ...] = ()  # the prompt file, loopctl's shim, scripts
    listable: tuple[str, ...] = ()
    extra_write: tuple[str, ...] = ()
    extra_read: tuple[str, ...] = ()


def home_paths(paths: tuple[str, ...], home: str) -> tuple[str, ...]:
    return tuple(posixpath.join(home, p[2:]) if p.startswith("~/") else p for p in paths)


def preset_write(preset: str, home: str) -> tuple[str, ...]:
    """What a preset's run may write in the home (for `loopctl agents`)."""
    return home_paths(PRESET_WRITE.get(preset, ()) + COMMON_WRITE, home)


def policy(inputs: Inputs) -> Policy:
    home = inputs.home
    writable = (inputs.cwd, inputs.tmpdir, inputs.decision_dir,
                *preset_write(inputs.preset, home), *inputs.extra_write)
    readable = (*SYSTEM_READ, *home_paths(COMMON_READ, home), *inputs.repo,
                *inputs.programs, *inputs.files, *inputs.extra_read)
    checked = (*preset_write(inputs.preset, home), *inputs.extra_write, *inputs.repo,
               *inputs.extra_read)
    return Policy(writable=_unique(writable), readable=_unique(readable),
                  devices=DEVICES + DEVICE_DIRS, listable=_unique(inputs.listable),
                  tmpdir=inputs.tmpdir, checked=_unique(checked))


def holds_home(path: str, home: str) -> bool:
    """Is `path` the root, the home or a folder above it? No rule may
    grant one (a whole home is every key and every other repository)."""
    path = posixpath.normpath(path)
    return path == "/" or path == home or home.startswith(path.rstrip("/") + "/")


def inside(path: str, folders: tuple[str, ...]) -> bool:
    """Is `path` one of `folders` or below one?"""
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def refused(inputs: Inputs) -> tuple[str, str] | None:
    """(path, why) of the first rule this run must not be given."""
    for path in (*inputs.repo, *inputs.extra_write, *inputs.extra_read):
        if holds_home(path, inputs.home):
            return path, "it is the root, the home or a folder holding the home"
    return None


def _unique(paths: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p for p in paths if p))


def mode_for(loop_mode: str | None, default: str | None) -> str:
    """The loop's own `sandbox:`, else the file's top-level one, else auto."""
    return loop_mode or default or "auto"


def wants(mode: str, agent: bool) -> bool:
    """Whether to confine: `auto` confines agent presets only (shell and
    `--command` loops run the user's own programs), `on` everything."""
    return mode == "on" or (mode == "auto" and agent)


def program_dirs(entry: str, home: str) -> tuple[str, ...]:
    """What to make readable for one PATH entry: the entry, and when it is
    the `bin` (or pyenv's `shims`) of an installation prefix such as
    ~/.nvm/versions/node/X, ~/.pyenv, ~/.cargo, /usr/local or a node_modules,
    the prefix: its programs are links into lib/ or a package folder beside
    it. Never a home, `/` or a `.local` (which holds other tools' data):
    then only the entry."""
    if not entry.startswith("/") or (home + "/").startswith(entry.rstrip("/") + "/"):
        return ()  # relative, or the home or a folder above it (/, /home)
    parent = posixpath.dirname(entry)
    broad = parent in ("/", home, "/root") or posixpath.dirname(parent) == "/home" \
        or posixpath.basename(parent) == ".local"
    if posixpath.basename(entry) in ("bin", ".bin", "shims") and not broad:
        return (entry, parent)
    return (entry,)


def check_extra(path: str, option: str) -> str | None:
    """Why a `--sandbox-write/--sandbox-read` path is refused (None: fine).
    Existence is checked by the caller, which may touch the disk."""
    if not path or any(c in path for c in "\n\r\0"):
        return f"bad {option} {path!r}: expected a path on one line"
    if len(path) > 4096:
        return f"bad {option}: the path is longer than 4096 characters"
    if not (path.startswith("/") or path.startswith("~/")):
        return f"bad {option} {path!r}: expected an absolute path (or one starting with ~/)"
    return None
