"""servelab: inspect, plan, serve, benchmark and publish LLM serving recipes on one box."""

__version__ = "0.1.0"
