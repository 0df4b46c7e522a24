"""The speed pieces: stand-ins for standard-library modules that loopctl's
often-run commands (the idle tick, `tick`, a daemon-fired run, `run`, `ls`,
`status`) would otherwise pay for at import or per call (issue 52).

What belongs here, and the rule each piece is held to:

- a piece stays only where it saves at least 2 ms of CPU or 5% on a command
  people run often, measured side by side with the module it replaces
  (bench/README.md); one that no longer does goes back to the public module;
- each piece is tested against the module it replaces (`json`, `hashlib` and
  `hmac`, `datetime`, `dataclasses`, `re`): tests/house/test_private_imports.py
  names the test file of each one that uses a private module;
- nothing outside this package imports a private CPython module (`_json`,
  `_sha2`, `_operator`, `_datetime`, ...);
- the package sits below every layer: domain, storage, cli and the rest may
  import it, and it imports nothing of loopctl but itself. It does no I/O.

This file stays empty of code: the idle tick imports a piece of it and must
not pay for the others.
"""
