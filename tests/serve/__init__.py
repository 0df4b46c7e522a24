"""`loopctl serve` (DESIGN §19), against a real server process: who may
come in, the API and its actions, webhooks, metrics (with promtool), the
pages (escaping, charts) and a real browser (headless chromium)."""
