"""Triton's model repository extension: load and unload models by name while serving.

Transport-neutral: the HTTP routes (``POST /v2/repository/models/{m}/load`` and ``/unload``)
and the gRPC ``RepositoryModelLoad`` / ``RepositoryModelUnload`` calls both use
:class:`ModelControl`, and get back ``None`` or one of the runtime's client-facing errors.

- Only in ``explicit`` mode (``--model-control-mode explicit``); in ``none`` mode every call is a
  400 that says how to turn it on, as Triton refuses it.
- ``load`` (re)loads a model from its folder, or with a JSON ``ModelConfig`` given in the
  request's ``config`` parameter instead of its config.pbtxt. Loading runs in a worker thread; a
  model that fails to load is a 400 ``failed to load '<name>': <reason>``, and whatever served
  before keeps serving.
- ``unload`` stops new requests at once (they get 404), then waits until the requests already
  running on the model have finished (draining) before it returns.
- The cache across reloads: the repository fingerprints each loaded model (BLAKE3 of its config
  and model files). When a load brings a fingerprint this server has not served under that name
  (a new file, a new config, or a model first loaded after start), the model's entries are
  flushed from every tier before the load returns, so no answer of another model file is served;
  reloading the same files keeps them. A flush that cannot reach Redis makes the load a 503
  (the model is loaded; load it again to retry the flush).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

from cachefleet.runtime.cache.api import ResponseCache
from cachefleet.runtime.cache.errors import CacheTierError
from cachefleet.runtime.errors import BadRequestError, NotReadyError
from cachefleet.runtime.models.errors import ModelLoadError
from cachefleet.runtime.models.types import ModelRepository
from cachefleet.runtime.service.in_flight import InFlight
from cachefleet.runtime.service.statistics import StatisticsRegistry

logger = logging.getLogger(__name__)

ControlMode = Literal["none", "explicit"]
#: The load parameter that carries a JSON ModelConfig (as tritonclient's ``load_model(config=)``).
CONFIG_PARAMETER = "config"


class ModelControl:
    """Loads and unloads models of a running server."""

    def __init__(
        self,
        repository: ModelRepository,
        cache: ResponseCache,
        statistics: StatisticsRegistry,
        in_flight: InFlight,
        mode: ControlMode,
        release: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        """``release``: lets go of what the service keeps of a model (its batchers, memoized
        responses), called once a model is unloaded or loaded again."""
        self._repository = repository
        self._release = release
        self._cache = cache
        self._statistics = statistics
        self._in_flight = in_flight
        self._mode = mode
        self._lock = asyncio.Lock()
        #: The fingerprint of each model's entries this server may serve from the cache.
        self._served = {name: repository.fingerprint(name) for name in repository.names()}

    @property
    def mode(self) -> ControlMode:
        return self._mode

    async def load(self, name: str, parameters: Mapping[str, Any] | None = None) -> None:
        """(Re)load model ``name``; ``parameters`` may hold ``config`` (a JSON ModelConfig).

        Raises BadRequestError (mode, parameters, or the load failed, with the reason) or
        NotReadyError (loaded, but its old cache entries could not be flushed).
        """
        self._check_mode("load")
        config = _config_parameter(name, parameters or {})
        async with self._lock:
            try:
                await asyncio.to_thread(self._repository.load, name, config)
            except ModelLoadError as error:
                raise BadRequestError(f"failed to load '{name}': {error}") from None
            self._statistics.forget(name)
            await self._released(name)
            fingerprint = self._repository.fingerprint(name)
            if self._served.get(name) != fingerprint:
                await self._flush(name)
                self._served[name] = fingerprint
        logger.info("model %r loaded", name)

    async def unload(self, name: str) -> None:
        """Stop serving ``name`` and wait for its requests in flight to finish.

        Raises BadRequestError in ``none`` mode, ModelNotFoundError for an unknown model.
        """
        self._check_mode("unload")
        async with self._lock:
            self._repository.unload(name)
            waiting = self._in_flight.count(name)
            if waiting:
                logger.info("model %r: unloading, draining %d request(s)", name, waiting)
            await self._in_flight.drained(name)
            self._statistics.forget(name)
            await self._released(name)
        logger.info("model %r unloaded", name)

    async def _released(self, name: str) -> None:
        if self._release is not None:
            await self._release(name)

    def _check_mode(self, action: str) -> None:
        if self._mode != "explicit":
            raise BadRequestError(
                f"cannot {action} models: model control is off "
                "(start the server with --model-control-mode explicit)"
            )

    async def _flush(self, name: str) -> None:
        try:
            removed = await self._cache.flush(name)
        except CacheTierError as error:
            raise NotReadyError(
                f"model '{name}' is loaded, but its cache entries from other model files could "
                f"not be removed ({error}); load it again to retry"
            ) from None
        logger.info("model %r: new model files, %d cache entries flushed", name, removed)


def _config_parameter(name: str, parameters: Mapping[str, Any]) -> str | None:
    unknown = sorted(set(parameters) - {CONFIG_PARAMETER})
    if any(key.startswith("file:") for key in unknown):
        raise BadRequestError(
            f"failed to load '{name}': model files in the request (file: parameters) are not "
            "supported; put them in the model repository"
        )
    if unknown:
        raise BadRequestError(f"failed to load '{name}': unknown load parameters {unknown}")
    config = parameters.get(CONFIG_PARAMETER)
    if config is not None and not isinstance(config, str):
        raise BadRequestError(
            f"failed to load '{name}': parameter 'config' must be a string holding JSON"
        )
    return config
