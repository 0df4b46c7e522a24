"""The team store (DESIGN §21): loopctl against a real PostgreSQL server."""
