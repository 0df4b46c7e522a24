"""Confining one run (DESIGN §14): find what the run needs on disk, ask the
pure policy what it may touch, build the Landlock ruleset, hand Popen the
hook that applies it.

The supervisor calls `confinement_for` once per run and gets a
`Confinement` (apply it), None (run unconfined; `.note` says why when it is
worth saying), or a LoopctlError (`on` and the kernel cannot: the run fails).

Applied as Popen's `preexec_fn`: two system calls in the forked child
(prctl, landlock_restrict_self) on a ruleset built here in the supervisor.
An exec wrapper would cost a second interpreter start per run (bench/sandbox.py
measures both); the hook costs the fork-instead-of-vfork Popen makes for it.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Mapping

from loopctl.domain import confinement
from loopctl.domain.errors import LoopctlError
from loopctl.domain.model import LoopDef
from loopctl.engine import repo_record
from loopctl.engine.containment import landlock, privdev, scope
from loopctl.storage import safe_open

SHEBANG_BYTES = 256


class Unavailable(Exception):
    """Why this run cannot be confined here."""


available = landlock.available  # kept here: doctor, the CLI and tests ask this module


class Confinement:
    """A ruleset ready for one run's agent, and its private TMPDIR."""

    def __init__(self, ruleset: landlock.Ruleset, policy: confinement.Policy,
                 repo: tuple[str, ...] = ()) -> None:
        self.ruleset = ruleset
        self.policy = policy
        self.tmpdir = policy.tmpdir
        self.repo = repo  # what the run may read of its repository (for the record)
        # Its own /dev/pts and /dev/shm where a mount namespace can be made.
        self.private_dev = privdev.possible()
        self._enter = privdev.entering(ruleset) if self.private_dev else None

    def preexec(self) -> None:
        if self._enter is not None:
            self._enter()
        self.ruleset.apply()

    def env(self) -> dict[str, str]:
        return {"TMPDIR": self.tmpdir, "TMP": self.tmpdir, "TEMP": self.tmpdir}

    def summary(self) -> str:
        scoped = "signals and abstract sockets scoped" if self.ruleset.version >= 6 \
            else "signals NOT scoped (ABI < 6)"
        also = [p for p in self.policy.readable if p in self.policy.checked]
        return (f"sandbox: landlock ABI {self.ruleset.version}, {scoped}; "
                f"{privdev.describe(self.private_dev)}; writable: "
                + ", ".join(self.policy.writable)
                + ("; readable too: " + ", ".join(also) if also else ""))

    def close(self) -> None:
        """After the run: the ruleset's fd, and the TMPDIR with whatever the
        agent left in it (rmtree never follows a symlink planted there)."""
        self.ruleset.close()
        shutil.rmtree(self.tmpdir, ignore_errors=True)


def confinement_for(loop: LoopDef, agent: bool, default: str | None, cwd: str,
                    env: Mapping[str, str], decision_dir: str, files: list[str],
                    own_dirs: list[str], run_id: str,
                    repo: tuple[str, ...] | None = None) -> tuple[Confinement | None,
                                                                   str | None]:
    """The run's confinement, or (None, why it runs unconfined: a note for
    the log, None when that is simply the loop's setting). `auto` runs
    unconfined only where the kernel cannot confine or the loop's own
    working directory holds the home (a container whose HOME is its
    workdir); `on` then raises, and so does, in either mode, anything a
    previous run could have planted (a state folder turned into a file or
    a link): no agent may downgrade or widen the next run. `repo` is
    loopctl's record of the repository (None: not looked up yet)."""
    mode = confinement.mode_for(loop.sandbox, default)
    if not confinement.wants(mode, agent):
        return None, None
    version, why = available()
    if why is not None:
        if mode == "on":
            raise LoopctlError(f"sandbox unavailable: {why}")
        return None, f"sandbox unavailable, running unconfined: {why}"
    try:
        inputs = gather(loop, cwd, env, decision_dir, files, own_dirs, run_id, repo)
    except safe_open.Refused as exc:
        raise LoopctlError(f"sandbox refused {exc.path}: {exc.why}") from None
    except Unavailable as exc:  # the loop's own setting (a container's HOME=cwd)
        if mode == "on":
            raise LoopctlError(f"sandbox unavailable: {exc}") from None
        return None, f"sandbox unavailable, running unconfined: {exc}"
    except OSError as exc:  # what an agent may have planted: never a downgrade
        where = f" ({exc.filename})" if exc.filename else ""
        raise LoopctlError(f"sandbox unavailable: {exc.strerror or exc}{where}") from None
    try:
        wrong = confinement.refused(inputs)
        if wrong is not None:
            raise safe_open.Refused(*wrong)
        return build(version, confinement.policy(inputs), inputs.repo), None
    except safe_open.Refused as exc:
        shutil.rmtree(inputs.tmpdir, ignore_errors=True)
        raise LoopctlError(f"sandbox refused {exc.path}: {exc.why}") from None
    except (landlock.LandlockError, OSError) as exc:
        shutil.rmtree(inputs.tmpdir, ignore_errors=True)
        raise LoopctlError(f"sandbox unavailable: {exc}") from None


def confined_argv(loop: LoopDef, argv: list[str]) -> list[str]:
    """The preset's argv for a confined run (codex: its own sandbox, which
    cannot start inside Landlock, replaced by loopctl's)."""
    from loopctl.agents.presets import PRESETS

    preset = PRESETS.get(loop.agent or "shell")
    if loop.command or preset is None or not preset.confined_swap[0]:
        return argv
    old, new = preset.confined_swap
    for i in range(len(argv) - len(old) + 1):
        if tuple(argv[i:i + len(old)]) == old:
            return argv[:i] + list(new) + argv[i + len(old):]
    return argv


def build(version: int, policy: confinement.Policy, repo: tuple[str, ...] = ()) -> Confinement:
    ruleset = landlock.Ruleset(version)
    try:
        every = ruleset.handled
        for path in policy.writable:
            _allow(ruleset, policy, path, every)
        for path in policy.readable:
            _allow(ruleset, policy, path, landlock.READ)
        for path in ("/dev", *policy.listable):
            ruleset.allow(path, landlock.FS_READ_DIR)
        for path in policy.devices:
            rights = landlock.DEVICE | landlock.READ
            if path in confinement.DEVICE_DIRS:
                rights = every
            ruleset.allow(path, rights)
    except BaseException:
        ruleset.close()
        raise
    return Confinement(ruleset, policy, repo)


def _allow(ruleset: landlock.Ruleset, policy: confinement.Policy, path: str,
           access: int) -> None:
    """One rule; a checked path through `safe_open` (a link at any of its
    components refuses the run), the descriptor checked being the one
    granted."""
    if path not in policy.checked:
        ruleset.allow(path, access)
        return
    fd = safe_open.open_rule(path)
    if fd is None:
        return  # missing: nothing to grant
    try:
        ruleset.allow_fd(fd, access, path)
    finally:
        os.close(fd)


def gather(loop: LoopDef, cwd: str, env: Mapping[str, str], decision_dir: str,
           files: list[str], own_dirs: list[str], run_id: str,
           repo: tuple[str, ...] | None = None) -> confinement.Inputs:
    """What this run needs, found on disk. loopctl's own paths resolved;
    those an agent could have replaced (preset folders, --sandbox-write and
    --sandbox-read, the repository) kept as named, for `build` to grant
    only if no component is a link."""
    home = os.path.realpath(env.get("HOME") or os.path.expanduser("~"))
    real_cwd = os.path.realpath(cwd)
    if real_cwd == home or (home + "/").startswith(real_cwd.rstrip("/") + "/"):
        raise Unavailable(f"the working directory {real_cwd} holds the home {home}; "
                          "confined there the agent could write all of it")
    preset = "shell" if loop.command else (loop.agent or "shell")
    make_state_dirs(preset, home)
    own = [os.path.realpath(d) for d in own_dirs]
    extra_write = tuple(resolve(p, home) for p in loop.sandbox_write)
    writable = (real_cwd, os.path.realpath(decision_dir),
                *confinement.preset_write(preset, home), *extra_write)
    programs = program_paths(env.get("PATH", os.defpath), home, own, writable)
    programs += interpreter_paths(loop, env, home, writable)
    programs += install_paths()
    import loopctl

    package = os.path.dirname(os.path.realpath(loopctl.__file__))
    if repo is None:  # a loop written by hand: looked up once, then recorded
        repo = repo_record.find(real_cwd, home)
    tmpdir = tempfile.mkdtemp(prefix=f"loopctl-{loop.name}-{run_id}-")
    return confinement.Inputs(
        preset=preset, home=home, cwd=real_cwd, tmpdir=os.path.realpath(tmpdir),
        decision_dir=os.path.realpath(decision_dir), repo=repo,
        programs=tuple(programs), files=tuple(os.path.realpath(f) for f in files),
        listable=(os.path.dirname(package),),
        extra_write=extra_write,
        extra_read=tuple(resolve(p, home) for p in loop.sandbox_read))


def resolve(path: str, home: str) -> str:
    """A --sandbox-write/--sandbox-read path as given (`~/` is the home):
    not resolved, since `build` refuses it if any component is a link."""
    return os.path.normpath(home + path[1:] if path.startswith("~/") else path)


def make_state_dirs(preset: str, home: str) -> None:
    """A preset's state folders exist before it starts: confined, it could
    not create them in the home (files such as ~/.claude.json it makes in
    a folder it may write, or not at all). Made without following a link
    (an agent may have planted one in ~/.cache)."""
    for path in confinement.preset_write(preset, home):
        if not path.endswith((".json", ".backup", ".yml", ".yaml", ".toml")):
            safe_open.make_dirs(path)


def planted_link(path: str, writable: tuple[str, ...]) -> bool:
    """Does `path` pass through a symbolic link that sits in a folder the
    run may write? Such a link is the agent's, and may point anywhere (a
    PATH entry in ~/.cache turned into a link to ~/.ssh): nothing is
    granted through it. Links elsewhere (/bin -> usr/bin, ~/.nvm's bin)
    are the user's."""
    todo = [p for p in path.split("/") if p][::-1]
    here, hops = "/", 0
    while todo:
        part = todo.pop()
        if part in (".", ".."):
            here = here if part == "." else os.path.dirname(here)
            continue
        step = os.path.join(here, part)
        try:
            if not stat.S_ISLNK(os.lstat(step).st_mode):
                here = step
                continue
            target = os.readlink(step)
        except OSError:
            return False  # missing: nothing is granted anyway
        hops += 1
        if confinement.inside(here, writable) or hops > 40:
            return True
        here = "/" if target.startswith("/") else here
        todo += [p for p in target.split("/") if p][::-1]
    return False


def program_paths(path_var: str, home: str, own: list[str],
                  writable: tuple[str, ...] = ()) -> list[str]:
    out: list[str] = []
    for entry in path_var.split(os.pathsep):
        if not entry.startswith("/") or planted_link(entry, writable):
            continue  # relative: would follow the agent's own cwd around
        real = os.path.realpath(entry)
        if any(real == d or real.startswith(d + "/") or d.startswith(real + "/")
               for d in own):
            continue  # loopctl's own folders (its shim is granted as a file)
        out += confinement.program_dirs(real, home)
    return out


def interpreter_paths(loop: LoopDef, env: Mapping[str, str], home: str,
                      writable: tuple[str, ...] = ()) -> list[str]:
    """The agent's program resolved through links, and its `#!` interpreter
    (`#!/usr/bin/env node` resolved on the run's PATH): a node CLI linked
    from ~/.nvm's bin runs files from lib/, and node from elsewhere. Not
    through a link planted in a folder the run may write, and no `#!` read
    from a program there (the agent could have rewritten it)."""
    from loopctl.agents.presets import binary

    out: list[str] = []
    path_var = env.get("PATH", os.defpath)
    found = shutil.which(binary(loop), path=path_var)
    if loop.command:  # `python3 /path/script.py`: the script, as a file
        out += [os.path.realpath(a) for a in loop.command[1:]
                if a.startswith("/") and os.path.isfile(a) and not planted_link(a, writable)]
    if found is None or planted_link(found, writable):
        return out
    real = os.path.realpath(found)
    shebang = None if confinement.inside(real, writable) else _interpreter(real, path_var)
    for program in (found, shebang):
        if program and not planted_link(program, writable):
            real = os.path.realpath(program)
            out += confinement.program_dirs(os.path.dirname(real), home) or [real]
    return out


def _interpreter(program: str, path_var: str) -> str | None:
    """The `#!` interpreter of the program: its first line only, read from
    the resolved file never through a link, non-blocking (a FIFO planted
    on PATH cannot hold the supervisor)."""
    try:
        head = safe_open.read_file(os.path.realpath(program), SHEBANG_BYTES)
    except (OSError, safe_open.Refused):
        return None
    if not head or not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
        return shutil.which(words[0], path=path_var) if words else None
    return words[0] if words else None


def install_paths() -> list[str]:
    """loopctl's installation, so `loopctl decide` works inside the sandbox:
    its package, the interpreter's prefixes, and the site-packages folders
    on sys.path (its dependencies; a user-site install among them). Not
    sysconfig: it costs 5 ms of every confined start to say the same."""
    import loopctl

    package = os.path.dirname(os.path.realpath(loopctl.__file__))
    places = {sys.prefix, sys.exec_prefix, sys.base_prefix, package,
              os.path.dirname(os.path.realpath(sys.executable))}
    places.update(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    # The standard library, wherever the interpreter was built to find it.
    places.add(os.path.dirname(os.__file__))
    return sorted(os.path.realpath(p) for p in places)


def status_line() -> tuple[bool, str]:
    """(available, what `agents` and `doctor` say about the sandbox here)."""
    version, why = available()
    if why is not None:
        return False, (f"unavailable here ({why}): agent presets in auto run unconfined, "
                       "loops with --sandbox on fail")
    scoped = "signals scoped" if version >= 6 else "signals NOT scoped (ABI < 6)"
    return True, (f"Landlock ABI {version} ({scoped}): auto confines agent presets; "
                  f"{privdev.describe(privdev.possible())}; "
                  f"unconfined runs: {scope.describe(version)}")


def doctor_findings(loops: Mapping[str, LoopDef],
                    default: str | None) -> list[tuple[str, str, str]]:
    """(level, check, message) for `doctor`: whether runs are confined here."""
    from loopctl.agents.presets import is_agent

    ok, line = status_line()
    if ok:
        version, _ = available()
        return [("ok" if version >= 6 else "warn", "sandbox", line),
                *refused_findings(loops, default)]
    strict = sorted(n for n, loop in loops.items()
                    if confinement.mode_for(loop.sandbox, default) == "on")
    loose = sorted(n for n, loop in loops.items() if is_agent(loop)
                   and confinement.mode_for(loop.sandbox, default) == "auto")
    found = [("warn", "sandbox", line)]
    found += [("error", "sandbox", f"loop {n!r} has sandbox on, and cannot run here")
              for n in strict]
    found += [("warn", "sandbox", f"loop {n!r} runs its agent unconfined") for n in loose]
    return found


def refused_findings(loops: Mapping[str, LoopDef],
                     default: str | None) -> list[tuple[str, str, str]]:
    """A confined loop's folder that its next run would refuse (a preset
    folder or a --sandbox-write/--sandbox-read path turned into a link)."""
    from loopctl.agents.presets import is_agent

    home = os.path.realpath(os.path.expanduser("~"))
    found = []
    for name, loop in sorted(loops.items()):
        if not confinement.wants(confinement.mode_for(loop.sandbox, default), is_agent(loop)):
            continue
        preset = "shell" if loop.command else (loop.agent or "shell")
        for path in (*confinement.preset_write(preset, home),
                     *(resolve(p, home) for p in (*loop.sandbox_write, *loop.sandbox_read))):
            try:
                fd = safe_open.open_rule(path)
            except safe_open.Refused as exc:
                found.append(("error", "sandbox", f"loop {name!r}: its runs fail: sandbox "
                              f"refused {exc.path}: {exc.why}"))
                break
            except OSError:
                continue
            if fd is not None:
                os.close(fd)
    return found
