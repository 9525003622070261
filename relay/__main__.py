"""``python -m relay``: the same as ``runwire relay``."""

from ._cli import main

main()
