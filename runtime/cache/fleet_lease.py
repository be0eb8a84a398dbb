"""The Redis side of fleet-wide coalescing: a short lease per key and the news of a fill.

A replica whose miss is about to compute first asks Redis, in one script, for the entry or else
a lease on it (``SET lease token NX PX ms``): either the answer is already there (another replica
wrote it since the lookup), or this replica now holds the lease and computes, or another one holds
it and this replica waits. Doing both in one script closes the gap between "no entry" and "no
lease" in which a holder could write the entry and release its lease unseen. When the holder's
entry is in Redis it releases the lease, only if the lease is still its own (its token: a lease
that expired and was taken by another replica is left alone), and publishes the key's digest on
the namespace's fills channel, in one script again.

Keys. The lease of ``cachefleet:v2:<namespace>:<model>:<hexdigest>`` is that key followed by
``:lease:{<the entry key>}``: the same namespace and model prefix, and a Redis Cluster hash tag
that is the entry key itself, so lease and entry live in one slot (a script may only touch one
slot) whatever the digest. A model flush's ``SCAN MATCH <prefix><model>:*`` sees lease keys, and
:meth:`~cachefleet.runtime.cache.key.KeySpace.holds` leaves them alone (what follows the model is
not one digest): leases end by themselves within their few seconds. Model names holding a brace
would change which part of the key Redis hashes, so those models are not coalesced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cachefleet.runtime.cache.key import REDIS_PREFIX, CacheKey, KeySpace

if TYPE_CHECKING:  # redis-py is imported only by servers that use Redis (see factory.py)
    from cachefleet.runtime.cache.redis_tier import RedisTier

#: KEYS: entry, lease. ARGV: token, lease milliseconds. The entry, else 1 (taken) or 0 (held).
_TAKE = """
local entry = redis.call('GET', KEYS[1])
if entry then return entry end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
"""
#: KEYS: lease. ARGV: token, channel, message. 1 if the lease was still the caller's.
_RELEASE = """
local held = redis.call('GET', KEYS[1]) == ARGV[1]
if held then redis.call('DEL', KEYS[1]) end
redis.call('PUBLISH', ARGV[2], ARGV[3])
if held then return 1 end
return 0
"""


def fills_channel(keys: KeySpace) -> str:
    """The namespace's channel of filled keys (one per fleet, like the flush channel)."""
    return f"{REDIS_PREFIX}:{keys.namespace}:fills"


def coalescible(model: str) -> bool:
    """Whether a model's keys can have a lease in the entry's slot (no brace in the name)."""
    return "{" not in model and "}" not in model


def lease_key(keys: KeySpace, key: CacheKey) -> str:
    entry = keys.redis_key(key)
    return f"{entry}:lease:{{{entry}}}"


class FleetLeases:
    """Takes and gives back leases in one namespace; faults raise ``CacheTierError``."""

    def __init__(self, tier: RedisTier, keys: KeySpace) -> None:
        self._tier = tier
        self._keys = keys
        self.channel = fills_channel(keys)

    async def take(self, key: CacheKey, token: str, lease_s: float) -> bytes | bool:
        """The entry if Redis holds it now; else True if the lease is now ``token``'s, False
        if another replica holds it."""
        entry = self._keys.redis_key(key)
        keys = (entry, lease_key(self._keys, key))
        reply = await self._tier.evaluate(_TAKE, keys, (token, max(1, round(lease_s * 1000))))
        if isinstance(reply, bytes):
            return reply
        return bool(reply == 1)

    async def release(self, key: CacheKey, token: str) -> bool:
        """Give the lease back if it is still ``token``'s, and tell the fleet that ``key`` is
        done (filled, or given up: the waiters look and compute themselves if it is not
        there). Whether the lease was still held."""
        keys = (lease_key(self._keys, key),)
        reply = await self._tier.evaluate(_RELEASE, keys, (token, self.channel, key.hexdigest))
        return bool(reply == 1)
