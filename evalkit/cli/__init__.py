"""The ``evalkit`` command: thin Typer commands over library functions."""

from evalkit.cli.run import app, main

__all__ = ["app", "main"]
