"""Generators of real checkpoints for tests, benchmarks and the demo (no network needed)."""
