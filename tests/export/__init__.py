"""The export tests (tests/export/test_*.py): a stand-in for each scheduler an
export targets (simulator.py) and shared export helpers (support.py)."""
