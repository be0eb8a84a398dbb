"""Triton's model repository extension: load and unload models by name while serving.

Transport-neutral: the HTTP routes (``POST /v2/repository/models/{m}/load`` and ``/unload``)
and the gRPC ``RepositoryModelLoad`` / ``RepositoryModelUnload`` calls both use
:class:`ModelControl`, and get back ``None`` or one of the runtime's client-facing errors.

- The model's name is checked first (``models.model_names``: one folder of the repository),
  before any file is staged under it; a refused name is a 400 naming it.
- Only in ``explicit`` mode (``--model-control-mode explicit``); in ``none`` mode every call is a
  400 that says how to turn it on, as Triton refuses it.
- ``load`` (re)loads a model from its folder, or with a JSON ``ModelConfig`` given in the
  request's ``config`` parameter instead of its config.pbtxt, and with model files sent in the
  request (``file:`` parameters, staged by ``model_files``). Loading runs on model control's own
  executor (built and closed by the composition root), never the loop's default executor, which
  everything else that leaves the loop shares: what else is waiting there cannot hold a load
  back. A model that fails to load is a 400 ``failed to load '<name>': <reason>``, and whatever
  served before keeps serving.
- ``unload`` stops new requests at once (they get 404), then waits until the requests already
  running on the model have finished (draining) before it returns.
- The cache across reloads: every cache key holds the model version's fingerprint (its
  effective config and files, see ``models.fingerprint``). A reload onto other files or another
  config moves the model to another key space the moment the new model object serves, so no
  request sees an answer of the previous files, and no flush is needed (the old entries age
  out by TTL and eviction). Reloading the same files keeps the same keys, and the cache with
  them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor
from typing import Any, Literal

from cachefleet.runtime.errors import BadRequestError
from cachefleet.runtime.models.errors import ModelLoadError
from cachefleet.runtime.models.model_names import check_model_name
from cachefleet.runtime.models.types import ModelRepository
from cachefleet.runtime.service.in_flight import InFlight
from cachefleet.runtime.service.model_files import PREFIX as FILE_PREFIX
from cachefleet.runtime.service.model_files import model_files, staged
from cachefleet.runtime.service.statistics import StatisticsRegistry

logger = logging.getLogger(__name__)

ControlMode = Literal["none", "explicit"]
#: The load parameter that carries a JSON ModelConfig (as tritonclient's ``load_model(config=)``).
CONFIG_PARAMETER = "config"
#: What a model's unload or reload is announced to.
Release = Callable[[str], Awaitable[None]]


class ModelControl:
    """Loads and unloads models of a running server."""

    def __init__(
        self,
        repository: ModelRepository,
        statistics: StatisticsRegistry,
        in_flight: InFlight,
        mode: ControlMode,
        executor: Executor,
        *,
        max_file_bytes: int = 64 * 2**20,
    ) -> None:
        self._repository = repository
        #: Called once a model is unloaded or loaded again (see :meth:`on_release`).
        self._releases: list[Release] = []
        #: Bound of the model files one load request may send (``--max-request-size``).
        self._max_file_bytes = max_file_bytes
        self._statistics = statistics
        self._in_flight = in_flight
        self._mode = mode
        #: Where loads run (one at a time: they hold the lock).
        self._executor = executor
        self._lock = asyncio.Lock()

    @property
    def mode(self) -> ControlMode:
        return self._mode

    async def load(self, name: str, parameters: Mapping[str, Any] | None = None) -> None:
        """(Re)load model ``name``; ``parameters`` may hold ``config`` (a JSON ModelConfig)
        and model files (``file:<version>/<name>``, which need ``config``: see
        ``model_files``).

        Raises BadRequestError (mode, parameters, or the load failed, with the reason),
        PayloadTooLargeError (files over the limit) or RepositoryPollError.
        """
        self._check_mode("load")
        try:
            check_model_name(name)  # before any file is staged under it
        except ModelLoadError as error:
            raise BadRequestError(f"failed to load '{name}': {error}") from None
        parameters = parameters or {}
        config = _config_parameter(name, parameters)
        files = model_files(name, parameters, self._max_file_bytes)
        if files and config is None:
            raise BadRequestError(
                f"failed to load '{name}': model files (file: parameters) need the 'config' "
                "parameter, the configuration of the folder they make"
            )
        loop = asyncio.get_running_loop()
        load = self._repository.load
        async with self._lock:
            try:
                if files:
                    with staged(name, files) as folder:
                        await loop.run_in_executor(self._executor, load, name, config, folder)
                else:
                    await loop.run_in_executor(self._executor, load, name, config)
            except ModelLoadError as error:
                raise BadRequestError(f"failed to load '{name}': {error}") from None
            self._statistics.forget(name)
            await self._released(name)
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

    def on_release(self, release: Release) -> None:
        """Call ``release(name)`` once a model is unloaded or loaded again, so that whoever
        keeps something of it (the service its batchers, HTTP its memoized responses) lets
        go of it."""
        self._releases.append(release)

    async def _released(self, name: str) -> None:
        for release in self._releases:
            await release(name)

    def _check_mode(self, action: str) -> None:
        if self._mode != "explicit":
            raise BadRequestError(
                f"cannot {action} models: model control is off "
                "(start the server with --model-control-mode explicit)"
            )


def _config_parameter(name: str, parameters: Mapping[str, Any]) -> str | None:
    unknown = sorted(
        key for key in parameters if key != CONFIG_PARAMETER and not key.startswith(FILE_PREFIX)
    )
    if unknown:
        raise BadRequestError(f"failed to load '{name}': unknown load parameters {unknown}")
    config = parameters.get(CONFIG_PARAMETER)
    if config is not None and not isinstance(config, str):
        raise BadRequestError(
            f"failed to load '{name}': parameter 'config' must be a string holding JSON"
        )
    return config
