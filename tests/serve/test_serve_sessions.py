"""Browser sessions (DESIGN §19), on a fake clock: random, 12 h idle
expiry renewed by use, bounded in number, a CSRF token each."""

from __future__ import annotations

from loopctl.serve.auth import Auth, Caller, Sessions


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_expires_after_12_hours_idle_and_use_renews_it() -> None:
    clock = Clock()
    sessions = Sessions(clock)
    sid = sessions.mint()
    clock.now += 11 * 3600
    assert sessions.find(sid) is not None
    clock.now += 11 * 3600
    assert sessions.find(sid) is not None, "use renews it"
    clock.now += 12 * 3600 + 1
    assert sessions.find(sid) is None
    assert sessions.find(sid) is None and not sessions.live, "gone for good"


def test_sessions_are_bounded_and_their_csrf_tokens_differ() -> None:
    sessions = Sessions(Clock(), limit=3)
    ids = [sessions.mint() for _ in range(5)]
    assert len(set(ids)) == 5 and len(sessions.live) == 3
    assert sessions.find(ids[0]) is None and sessions.find(ids[4]) is not None
    assert len({s.csrf for s in sessions.live.values()}) == 3
    for junk in ("", "x" * 10_000, ids[4] + "x"):
        assert sessions.find(junk) is None


def test_the_cookie_is_a_session_never_the_token() -> None:
    auth = Auth("T" * 43, 8177, frozenset({"127.0.0.1:8177"}), tls=True)
    cookie = auth.set_cookie(True)
    name, _, rest = cookie.partition("=")
    value = rest.split(";", 1)[0]
    assert name == "__Host-loopctl_8177" and "; Secure" in cookie and "T" * 43 not in cookie
    assert auth.caller({"authorization": f"Bearer {value}"}, "/api/loops") == Caller(None)
    assert auth.caller({"cookie": f"{name}={value}"}, "/api/loops") == Caller(None)
    page = auth.caller({"cookie": f"{name}={value}"}, "/loops/x")
    assert page.via == "session" and auth.csrf_ok(page, page.csrf)
    assert not auth.csrf_ok(page, "T" * 43) and not auth.csrf_ok(Caller("bearer"), "")
