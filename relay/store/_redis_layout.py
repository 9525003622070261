"""How many shards a Redis store prefix was written with, kept in Redis and checked.

Sessions are spread over a store's shards by a hash of their id
(``relay.store._redis_shards``). A relay started with another shard count would
look for them in the wrong place, so shard 0 keeps the count under
``<prefix>shards`` and every start compares it.
"""

from __future__ import annotations

import logging

from transport.errors import VALIDATION_ERROR, RunwireError

from ._redis_pipeline import Pipeline, check

__all__ = ["check_shards"]

log = logging.getLogger("runwire.relay.store")


async def check_shards(pipeline: Pipeline, key: str, shards: int, where: str) -> None:
    """Record ``shards`` at ``key`` if nothing is there yet; raise
    ``RunwireError(VALIDATION_ERROR)`` if another count is. A Redis that refuses the
    write (out of memory, say) is let be: reads go on there."""
    (known,) = await pipeline.call(("GET", key))
    if known is None:
        reply, known = await pipeline.call(("SET", key, str(shards), "NX"), ("GET", key))
        if isinstance(reply, RunwireError):
            log.warning("could not record shards=%d at %s: %s", shards, key, reply)
    check(known)
    if known is not None and int(known) != shards:
        raise RunwireError(
            VALIDATION_ERROR,
            f"the Redis store at {where} was written with shards={int(known)} under "
            f"{key!r}, not {shards}: use the same shards on every relay, for the life "
            "of the data",
            details={"shards": int(known)},
        )
