"""The runwire relay: one ordered, durable WebSocket channel per session.

``async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:``
runs one in process; ``runwire relay`` and ``python -m relay`` run one from
the command line. It needs the ``relay`` extra: ``pip install 'runwire[relay]'``.
"""

try:  # the server-only dependencies, of the "relay" extra
    import jwt  # noqa: F401
    import prometheus_client  # noqa: F401
except ImportError as exc:
    raise ImportError(
        f"the runwire relay needs the 'relay' extra ({exc.name} is missing): "
        "pip install 'runwire[relay]'",
        name=exc.name,
    ) from exc

from ._options import RelayOptions
from ._server import Server, serve

__all__ = ["RelayOptions", "Server", "serve"]
