"""datetime's classes, without running datetime.py where that is avoidable.

CPython 3.10 and 3.11's `datetime.py` defines the whole pure-Python
implementation, then replaces it with the C one (`from _datetime import *`):
~3.4M instructions of every run's start, for classes never used. The C
module's are the very same classes (`datetime.datetime is
_datetime.datetime`); where there is no `_datetime` (another
implementation), the `datetime` module's.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from datetime import datetime, timedelta, timezone, tzinfo
else:
    try:
        from _datetime import datetime, timedelta, timezone, tzinfo
    except ImportError:
        from datetime import datetime, timedelta, timezone, tzinfo

__all__ = ["datetime", "timedelta", "timezone", "tzinfo"]
