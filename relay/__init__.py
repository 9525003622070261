"""The runwire relay: one ordered, durable WebSocket channel per session.

``async with relay.serve(host="127.0.0.1", port=0, store="memory://") as server:``
runs one in process; ``runwire relay`` and ``python -m relay`` run one from
the command line.
"""

from .options import RelayOptions
from .server import Server, serve

__all__ = ["RelayOptions", "Server", "serve"]
