"""``python -m runwire``: the same as the ``runwire`` command."""

from .cli import main

main()
