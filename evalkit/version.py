"""evalkit's version: a leaf module (it imports nothing), read by the package root, the manifest and the CLI."""

__version__ = "0.1.0"
