"""Drivers (tick, daemon, run), the supervisor and the steps of a run; the only spawner of agents."""
