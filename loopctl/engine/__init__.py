"""Drivers (tick, daemon, run), the supervisor and the steps of a run.

The only package that spawns an agent."""
