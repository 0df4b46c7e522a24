"""The house's own rules: layers, sizes, docs in step with the code, what ships,
the tests' isolation."""
