"""Helpers for the hostile-input tests: tests/engine/test_hostile_agent.py,
tests/storage/test_hand_edited_and_damaged_files.py and tests/storage/test_path_traversal.py."""
