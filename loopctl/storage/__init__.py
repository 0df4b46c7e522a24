"""loopctl's own files: paths, the store (definitions, state, records), atomic
writes, YAML io, the lease, locks, run logs and derived caches."""
