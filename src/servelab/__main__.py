"""``python -m servelab``: the same as the ``servelab`` command."""

from servelab.cli.app import main

main()
