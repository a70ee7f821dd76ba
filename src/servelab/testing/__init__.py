"""Test infrastructure shipped with servelab so that tests and benchmarks can share it.

Nothing here is used by servelab's own commands: :mod:`servelab.testing.synthetic_server`
is a synthetic OpenAI-compatible streaming server with known timings and fault injection.
"""
