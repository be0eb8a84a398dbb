"""Planted entries: garbage and foreign entries written at keys the clients are about to ask for.

A foreign entry is valid in itself (another input, version, model or parameters), so only
the servers' digest check stands between it and a wrong answer.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

from cachefleet.bench.processes import RedisServer
from cachefleet.runtime.cache.entry import encode_entry
from cachefleet.runtime.cache.key import compute_key
from cachefleet.runtime.tensor import Tensor
from harness.chaos.answers import (
    MODEL,
    PLANTED_BASE,
    PLANTED_COUNT,
    POOL_SIZE,
    expected_outputs,
    input_tensors,
    redis_key,
)
from harness.chaos.control import connect
from harness.chaos.faults import FaultLog


class Planter:
    """Plants entries into ``redis`` from its own thread until ``stop`` is set."""

    def __init__(
        self,
        redis: RedisServer | None,
        faults: FaultLog,
        stop: threading.Event,
        fingerprint: str,
        connect_to: Callable[[], Any] | None = None,
    ) -> None:
        """``fingerprint``: of the model files the servers serve (their keys depend on it)."""
        self.redis = redis
        self.fingerprint = fingerprint
        #: Makes the planter's client (a cluster run passes a Redis Cluster client's maker).
        self.connect_to = connect_to or (lambda: connect(_given(redis)))
        self.faults = faults
        self.stop = stop
        self.rng = random.Random(7)
        self.foreign = foreign_entries(fingerprint)

    def plant_forever(self) -> None:
        """Every 100 ms, overwrite 50 planted keys with garbage or another request's entry."""
        client = None
        while not self.stop.wait(0.1):
            try:
                client = client or self.connect_to()
                pipe = client.pipeline(transaction=False)
                for _ in range(50):
                    seed = PLANTED_BASE + self.rng.randrange(PLANTED_COUNT)
                    pipe.set(redis_key(seed, self.fingerprint), self._bad_value(client))
                pipe.execute()
                self.faults.planted += 50
            except Exception:  # Redis killed, paused or full: plant again later
                client = None

    def _bad_value(self, client: Any) -> bytes:
        kind = self.rng.randrange(4)
        if kind == 0:  # a real entry of a pool request, copied as is
            value = client.get(redis_key(self.rng.randrange(POOL_SIZE), self.fingerprint))
            if value:
                return bytes(value)
        if kind == 1:  # garbage
            return self.rng.randbytes(self.rng.randrange(1, 300))
        if kind == 2:  # a real-looking entry with one bit flipped, or cut short
            entry = bytearray(self.rng.choice(self.foreign))
            if self.rng.random() < 0.5:
                return bytes(entry[: self.rng.randrange(len(entry))])
            entry[self.rng.randrange(len(entry))] ^= 1 << self.rng.randrange(8)
            return bytes(entry)
        return self.rng.choice(self.foreign)


def foreign_entries(fingerprint: str) -> list[bytes]:
    """Valid entries written for another input, another version, another model, other
    parameters and other model files.

    Each holds the outputs of another request, so serving one would be a wrong answer.
    """
    inputs, outputs = input_tensors(5), expected_outputs(6)
    tensors = [Tensor.from_numpy(name, array) for name, array in outputs.items()]
    strings = [Tensor("INPUT0", "BYTES", t.shape, t.data) for t in inputs]
    other_files = "0" * len(fingerprint)
    digests = [
        compute_key(MODEL, "1", fingerprint, input_tensors(6), {}).digest,  # another input
        compute_key(MODEL, "2", fingerprint, inputs, {}).digest,  # another version
        compute_key("simple_string", "1", fingerprint, strings, {}).digest,  # another model
        compute_key(MODEL, "1", fingerprint, inputs, {"sequence_id": 1}).digest,  # parameters
        compute_key(MODEL, "1", other_files, inputs, {}).digest,  # other model files
    ]
    return [encode_entry(digest, tensors, time.time() + 3600) for digest in digests]


def _given(redis: RedisServer | None) -> RedisServer:
    if redis is None:
        raise ValueError("a Planter without a Redis server needs connect_to")
    return redis
