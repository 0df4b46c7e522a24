"""The Landlock domain an unconfined run still gets (DESIGN §14).

`--sandbox off`, and `shell`/`--command` loops under `auto`, run the user's
own programs with the user's rights, but not past their process bounds: the
agent cannot signal a process outside its run (ABI 6 scoped signals: the
supervisor, the daemon, other runs) and cannot write a cgroup file (moving
itself out of its run's cgroup through `cgroup.procs`). Nothing else is
restricted: every file it could write before, it can write.

Landlock only grants, it cannot deny one folder inside a granted one. So
the domain handles one right, writing to a file (with moving a file to
another folder, which every domain handles from ABI 2), and grants it beneath
every entry of `/` except the ones on the way to a cgroup mount, and so on
down: `/sys` is split into its entries, `/sys/fs` into its, and
`/sys/fs/cgroup` (every cgroup mount) gets no rule. Entries are read when
the run starts: a top-level folder made later is not writable for it.
Symlinks get no rule (what they name is checked as itself), so a link to
`/sys/fs/cgroup` grants nothing.
"""

from __future__ import annotations

import os

from loopctl.engine.containment import landlock

CGROUP_TYPES = ("cgroup", "cgroup2")
WHERE_CGROUPS_LIVE = "/sys/fs/cgroup"
# Writing a file, and (always handled by the kernel from ABI 2 on, so
# granted with it) linking or moving one into another folder.
RIGHTS = landlock.FS_WRITE_FILE | landlock.FS_REFER
MAX_SPLITS = 64  # folders split on the way to cgroup mounts; a bound, not a limit met


class Scope:
    """An open scope-only ruleset for one unconfined command."""

    def __init__(self, ruleset: landlock.Ruleset) -> None:
        self.ruleset = ruleset

    def preexec(self) -> None:
        self.ruleset.apply(privileged=os.geteuid() == 0)

    def summary(self) -> str:
        signals = "signals scoped to the run" if self.ruleset.scoped \
            else "signals NOT scoped (ABI < 6)"
        return (f"unconfined, but {signals} and no cgroup file writable "
                f"(landlock ABI {self.ruleset.version})")

    def close(self) -> None:
        self.ruleset.close()


def describe(version: int) -> str:
    """What an unconfined run keeps to here (for `agents` and `doctor`)."""
    if version < 2:
        return "not restricted (Landlock ABI < 2)"
    signals = "signals scoped to the run" if version >= 6 else "signals NOT scoped (ABI < 6)"
    return f"{signals}, no cgroup file writable, no mount; else your own rights"


def for_unconfined(version: int) -> Scope | None:
    """The scope-only domain at Landlock ABI `version`; None below ABI 2,
    where every domain forbids moving a file to another folder."""
    if version < 2:
        return None
    ruleset = landlock.Ruleset(version, handled=RIGHTS, scoped=landlock.SCOPE_SIGNAL)
    try:
        for path in writable_entries(cgroup_mounts()):
            ruleset.allow(path, RIGHTS, follow=False)
    except BaseException:
        ruleset.close()
        raise
    return Scope(ruleset)


def cgroup_mounts() -> list[str]:
    """Every cgroup (v1 and v2) mount point, and the folder they live in."""
    found = [WHERE_CGROUPS_LIVE]
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                fields = line.split()
                if len(fields) > 2 and fields[2] in CGROUP_TYPES:
                    found.append(_unescape(fields[1]))
    except OSError:
        pass
    return sorted({os.path.normpath(p) for p in found})


def _unescape(field: str) -> str:
    """/proc/self/mounts writes a space as \\040 (and tab, newline, backslash)."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def writable_entries(excluded: list[str], root: str = "/") -> list[str]:
    """Paths whose rule together covers everything under `root` but
    `excluded` and the folders leading to them (no rule of their own)."""
    out: list[str] = []
    todo = [root]
    splits = 0
    while todo and splits < MAX_SPLITS:
        folder = todo.pop()
        splits += 1
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            path = os.path.join(folder, entry.name)
            if path in excluded or entry.is_symlink():
                continue
            if any(e.startswith(path + "/") for e in excluded):
                todo.append(path)
            else:
                out.append(path)
    return out
