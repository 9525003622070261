"""The ``runwire`` command: ``runwire relay`` and ``runwire demo``."""
