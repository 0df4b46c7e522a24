"""End-to-end tests with the real agent CLIs against local model-API stubs."""
