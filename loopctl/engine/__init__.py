"""Drivers (tick, daemon, run), the supervisor and the steps of a run.

The only spawner of agents."""
