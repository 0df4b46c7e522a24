"""The agent CLI a GitHub workflow installs before the run (issue 51, item
15: a workflow without it failed as exported, `agent not found`), pinned as
loopctl itself is (DESIGN §9): the npm package of the preset (presets.INSTALL)
at the version loopctl's end-to-end tests run (tests/e2e/common.py VERSIONS;
a test keeps the two equal), or what `--agent-install` names, an exact npm
`NAME@VERSION` or pip `NAME==VERSION`. Never a bare name or a range."""

from __future__ import annotations

import re

from loopctl.agents.presets import INSTALL
from loopctl.domain.errors import UsageError

# The versions tests/e2e/ runs (their CLIs are installed by .ci/run).
TESTED: dict[str, str] = {"claude": "2.1.332", "codex": "0.171.0", "gemini": "0.61.0",
                          "qwen": "0.24.4", "opencode": "1.18.33"}

_NPM = re.compile(r"(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*"
                  r"@[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?")
_PIP = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==[0-9]+(\.[0-9]+)*([abc]|rc|\.post|\.dev)?[0-9]*")
NPM_PREFIX = "npm install -g "


def npm_package(preset: str) -> str | None:
    """The preset's npm package, when its documented install is npm's."""
    command = INSTALL.get(preset, "")
    return command[len(NPM_PREFIX):] if command.startswith(NPM_PREFIX) else None


def install_spec(preset: str, given: str | None) -> tuple[str, str] | None:
    """("npm" or "pip", the exact spec) for the preset's CLI; None when the
    preset needs none (shell). Refused without a pin."""
    if given is not None:
        return _checked(given)
    if preset == "shell":
        return None
    package = npm_package(preset)
    if package and preset in TESTED:
        return "npm", f"{package}@{TESTED[preset]}"
    how = f"`{INSTALL[preset]}`" if preset in INSTALL else "its maintainers' install"
    example = f"{package}@VERSION" if package else "NAME@VERSION (npm) or NAME==VERSION (pip)"
    raise UsageError(f"no pinned install of the {preset} CLI for the workflow (it installs "
                     f"with {how}): pass --agent-install {example}, an exact version you "
                     "have tested")


def _checked(spec: str) -> tuple[str, str]:
    if len(spec) <= 200 and _NPM.fullmatch(spec):
        return "npm", spec
    if len(spec) <= 200 and _PIP.fullmatch(spec):
        return "pip", spec
    raise UsageError(f"bad --agent-install {spec[:80]!r}: expected an exact npm NAME@VERSION "
                     "(e.g. @openai/codex@0.171.0) or pip NAME==VERSION")
