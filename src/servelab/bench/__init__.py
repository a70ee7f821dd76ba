"""Benchmarking any OpenAI-compatible endpoint: client, prompts, workloads, metrics, statistics."""
