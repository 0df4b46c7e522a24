"""The cyclic garbage collector: one setting for a command, one for a
process that lives long, made here and nowhere else.

A command (loopctl.entry) runs with the collector off: start-up imports
~200 modules and makes ~100,000 objects, none of them cyclic garbage, and
walking them again and again is ~4% of a short command's CPU; reference
counting still frees everything else, and the process ends soon.

A process that lives long must collect: a request or a run leaves cycles
(an exception and its traceback, a thread's frames, a socket's wrappers),
and with the collector off each is kept for good: `loopctl serve` grew
6-10 KiB per connection that way. The daemon (and `daemon --serve`), the
server, each warm supervisor and `watch` call `long_lived()` once their
start-up is done: what start-up made is frozen (never walked again, and in
a forked worker never written by a collection: no copy-on-write fault) and
the collector is on.
"""

from __future__ import annotations

import gc


def short_lived() -> None:
    """For a command: off now, and everything frozen at exit, where the
    interpreter's last collection would walk every object alive (~17M
    instructions, a tenth of a run). At exit, not here: a test calling
    `main` in-process lives on."""
    import atexit

    gc.disable()
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)


def long_lived() -> None:
    """For a process that lives long: start-up's objects frozen, the
    collector on. Called again (a server inside a daemon, a worker forked
    from one), it freezes what was made since."""
    gc.freeze()
    gc.enable()
