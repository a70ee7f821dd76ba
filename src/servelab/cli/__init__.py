"""Thin Typer layer over the servelab library."""
