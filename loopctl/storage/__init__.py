"""loopctl's own files: paths, the store, the lease, locks, run records and logs, caches."""
