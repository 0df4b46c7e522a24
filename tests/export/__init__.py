"""Helpers for the hand-off tests (tests/test_handoff_*.py): a stand-in for each
scheduler an export targets (simulator.py) and shared export helpers (support.py)."""
