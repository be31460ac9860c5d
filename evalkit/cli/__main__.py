"""``python -m evalkit.cli``: the ``evalkit`` command."""

from evalkit.cli import main

main()
