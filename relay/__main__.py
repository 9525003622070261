"""``python -m relay``: the same as ``runwire relay``."""

from .cli import main

main()
