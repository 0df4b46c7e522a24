"""The speed pieces: stand-ins for standard-library modules that loopctl's
often-run commands (the idle tick, `tick`, a daemon-fired run, `run`, `ls`,
`status`) would otherwise pay for at import or per call (issue 52).

What belongs here, and the rule each piece is held to:

- a piece stays only where it saves at least 2 ms of CPU or 5% on a command
  people run often, measured side by side with the module it replaces
  (bench/README.md); one that no longer does goes back to the public module;
- each piece is tested against the module it replaces (`json`, `hashlib` and
  `hmac`, `dataclasses`, `re`, `ctypes`): tests/house/test_private_imports.py
  names the test file of each one that uses a private module;
- nothing outside this package imports a private CPython module (`_json`,
  `_sha2`, `_operator`, `_datetime`, ...);
- the package sits below every layer: domain, storage, cli and the rest may
  import it, and it imports nothing of loopctl but itself. It does no I/O
  (`cfuncs` loads the library its caller names, when asked).

What each piece saves, against the standard module at every use
(`python bench/fast_pieces.py`, callgrind, 2026-12-06; bench/README.md):

- `data_class` (`dataclasses`): 42 ms (91%) of `tick --wait`, 21 ms (87%)
  of `run NAME`, 14 ms (49%) of `ls` at 1,000 loops, 10 ms of `status`;
- `flatjson` (`json` on the idle tick's `summary.json`): 3.5 ms (62%) of
  the idle tick;
- `jsontext` (`json.dumps(indent=2)`): 77 ms (285%) of `ls --json` at
  1,000 loops;
- `lazy_re` (`re.compile` at import): 4.0 ms (8.5%) of `tick --wait`,
  2.1 ms (8.5%) of `run NAME`, 1.9 ms (6.7%) of `ls`;
- `digests` (`hashlib`, `hmac`): 3.0 ms (6.4%) of `tick --wait`, 1.5 ms
  (6.1%) of `run NAME`;
- `cfuncs` (`ctypes`, for the store home's idle tick's libpq query): ~1 ms
  (5-6%) of that tick's CPU (median of 20 ticks, 18.2 -> 17.4 ms under
  `python -m`, bench/README.md), measured with process CPU, not callgrind;
- outside the package, `TYPE_CHECKING = False` (`typing`): 5.2 ms (93%) of
  the idle tick, 3.8 ms (8.1%) of `tick --wait`.

Removed for falling below the bar: `dates` (`datetime`, at most 0.85 ms and
1.8%) and `jsonfast` (`json`, at most 1.2 ms and 2.6%).

This file stays empty of code: the idle tick imports a piece of it and must
not pay for the others.
"""
