"""Where a generated workflow installs loopctl from (DESIGN §9, PEP 610).

The package index's `loopctl` is an unrelated project, so a bare name is
never used: the source is either given (`--install SPEC`) or read from how
this installation was made (`direct_url.json`): a VCS checkout pinned to its
commit, or an archive URL with its hash. A local or editable checkout cannot
travel, and an index install could be anyone's: both are refused, naming
`--install`.
"""

from __future__ import annotations

import json
from typing import Any

from loopctl.domain.errors import UsageError

EXAMPLE = "'loopctl @ git+https://github.com/OWNER/loopctl@v1.2.3'"


def check_spec(spec: str) -> str:
    """A pip requirement that names a pinned source, safe to hand to a
    workflow: a direct reference (`NAME @ URL`), a URL, or a path."""
    text = spec.strip()
    if not text or text.startswith("-") or any(c in text for c in "\r\n\0") \
            or "${{" in text or len(text) > 2000:
        raise UsageError(f"bad --install {spec[:80]!r}: expected a pip requirement such as "
                         f"{EXAMPLE}")
    pinned = " @ " in text or "://" in text or text.startswith(("./", "../", "/"))
    if not pinned:
        raise UsageError(f"bad --install {spec[:80]!r}: a bare name installs whatever the "
                         "package index calls loopctl (an unrelated project); give a pinned "
                         f"source such as {EXAMPLE} or a path in the repository like ./tools")
    return text


def spec_from_direct_url(data: dict[str, Any] | None) -> str:
    """The pinned requirement for an installation described by PEP 610."""
    hint = f"pass --install with a pinned source, e.g. {EXAMPLE}"
    if not data or not isinstance(data.get("url"), str):
        raise UsageError("this loopctl was not installed from a URL or a repository "
                         f"(the package index's loopctl is another project): {hint}")
    url = data["url"]
    vcs = data.get("vcs_info")
    if isinstance(vcs, dict) and vcs.get("commit_id"):
        return f"loopctl @ {vcs.get('vcs', 'git')}+{url}@{vcs['commit_id']}"
    archive = data.get("archive_info")
    if isinstance(archive, dict) and not url.startswith("file:"):
        hashes = archive.get("hashes") or {}
        digest = hashes.get("sha256") if isinstance(hashes, dict) else None
        return f"loopctl @ {url}" + (f"#sha256={digest}" if digest else "")
    raise UsageError(f"this loopctl is installed from a local checkout ({url}), which a "
                     f"runner cannot reach: {hint}")


def installed_spec() -> str:
    from importlib import metadata

    try:
        raw = metadata.distribution("loopctl").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        raw = None
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        data = None
    return spec_from_direct_url(data if isinstance(data, dict) else None)
