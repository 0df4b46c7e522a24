"""The CLI's edges (loopctl/cli, loopctl/entry.py): parsing, bad input, rendering,
the direct paths, watch."""
