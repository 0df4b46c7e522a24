"""Helpers for the hostile-input tests: tests/test_hostile_agent.py,
tests/test_hostile_files.py and tests/test_path_traversal.py."""
