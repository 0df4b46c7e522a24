"""Helpers for tests/test_handoff.py: a stand-in for each scheduler an export targets."""
