"""The store (loopctl/storage): loops.yaml, state.json, run files, caches, locks and the lease."""
