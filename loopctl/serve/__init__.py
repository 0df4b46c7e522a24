"""`loopctl serve`: the dashboard, the API, webhooks and metrics of one home (DESIGN §19).

Only `loopctl serve` (and `daemon --serve`) imports this package: no other
command pays for the HTTP server.
"""
