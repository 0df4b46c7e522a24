"""The one error path of every entry point: what the user sees of a failure."""

from __future__ import annotations

import os
import sys

from loopctl.domain.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, LoopctlError


def wants_json(args: list[str]) -> bool:
    """Whether `args` (before a `--`) ask for `--json`: a failure is then
    also a JSON object on stdout, where a script reading the JSON looks."""
    return "--json" in (args[:args.index("--")] if "--" in args else args)


def say(message: str, code: int, label: str = "error: ", as_json: bool = False) -> int:
    """A failure: `loopctl: error: MESSAGE` on stderr and, `as_json`,
    `{"version": 1, "error": {"code": CODE, "message": MESSAGE}}` on stdout."""
    label = "" if code == EXIT_OK else label
    print(f"loopctl: {label}{message}", file=sys.stderr)
    if as_json and code != EXIT_OK:
        import json

        print(json.dumps({"version": 1, "error": {"code": code, "message": message}}),
              flush=True)
    return code


def report(exc: BaseException, as_json: bool = False) -> int:
    """The one error path of every entry point: one line on stderr and the
    documented exit code; a traceback only with LOOPCTL_DEBUG=1."""
    if isinstance(exc, LoopctlError):
        return say(exc.message, exc.code, as_json=as_json)
    if isinstance(exc, KeyboardInterrupt):
        return say("interrupted", EXIT_INTERRUPTED, "", as_json)
    if isinstance(exc, BrokenPipeError):
        return EXIT_OK  # `loopctl ls | head`: the reader left, nothing is wrong
    if os.environ.get("LOOPCTL_DEBUG"):
        raise exc
    return say(f"unexpected error: {type(exc).__name__}: {str(exc)[:300]} "
               "(set LOOPCTL_DEBUG=1 for a traceback)", EXIT_FAILED, "", as_json)
