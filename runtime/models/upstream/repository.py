"""The upstream's models as a model repository: read at start, refreshed on a timer thread.

Every ``refresh_s`` one thread asks the upstream for its readiness, its release, its repository
index and the config of each model with a READY version, and builds the view the service reads:
a :class:`UpstreamModel` per READY version, the other rows listed with their state and reason
(so ``--strict-readiness`` judges the upstream's models as Triton's own readiness would). The
new view replaces the old one in one assignment; a version whose identity did not change keeps
its model object (its scheduler, its memoized answers), one whose identity changed gets a new
object and so new keys.

When the upstream cannot be reached, the last view keeps serving what the cache holds (a miss
fails fast: the breaker), while the index reports every version UNAVAILABLE with the reason, so
the server is not ready until the upstream answers again. At start, :func:`open_upstream`
waits for the upstream's first answer: until then the server does not serve.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cachefleet.runtime.config import UpstreamSettings
from cachefleet.runtime.errors import BadRequestError, ModelNotFoundError, ServingError
from cachefleet.runtime.models.config import to_model_config
from cachefleet.runtime.models.errors import ModelLoadError
from cachefleet.runtime.models.types import Model, ModelIndexEntry
from cachefleet.runtime.models.upstream.client import (
    IndexRow,
    UpstreamClient,
    UpstreamUnavailableError,
    connect,
)
from cachefleet.runtime.models.upstream.identity import (
    SharedFiles,
    reported_identity,
    upstream_fingerprint,
)
from cachefleet.runtime.models.upstream.model import UpstreamModel

logger = logging.getLogger(__name__)

READY = "READY"
UNAVAILABLE = "UNAVAILABLE"


@dataclass(frozen=True)
class _View:
    """What the upstream reported at one refresh."""

    rows: tuple[IndexRow, ...] = ()
    #: Loaded versions per model, by version number.
    models: Mapping[str, Mapping[int, UpstreamModel]] = field(default_factory=dict)
    #: Why a READY row is not served here (a config this server cannot serve through a cache).
    refused: Mapping[tuple[str, str], str] = field(default_factory=dict)


class UpstreamRepository:
    """The ModelRepository of an upstream server (see the module docstring)."""

    def __init__(
        self, client: UpstreamClient, settings: UpstreamSettings, shared: SharedFiles | None
    ) -> None:
        self._client = client
        self._refresh_s = settings.refresh_s
        self._named = settings.models
        self._shared = shared
        self._view = _View()
        #: None while the upstream answers; otherwise why it is not serving.
        self._down: str | None = "not asked yet"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: One refresh at a time (the timer's, a load's): an older reading never replaces a
        #: newer one.
        self._refreshing = threading.Lock()

    @property
    def target(self) -> str:
        return self._client.target

    @property
    def circuit_open(self) -> bool:
        """Whether the upstream's breaker refuses calls now (a probe aside): what the
        ``cachefleet_upstream_circuit_open`` gauge reads at each scrape."""
        return self._client.breaker.is_open

    # -- what the service reads (event loop) -------------------------------------------------

    def index(self) -> list[ModelIndexEntry]:
        view, down = self._view, self._down
        entries = []
        for row in view.rows:
            state, reason = row.state, row.reason
            refused = view.refused.get((row.name, row.version))
            if state == READY and (down is not None or refused is not None):
                state, reason = UNAVAILABLE, refused or f"upstream {self.target}: {down}"
            entries.append(ModelIndexEntry(row.name, row.version, state, reason))
        return entries

    def versions(self, name: str) -> list[str]:
        return [str(version) for version in sorted(self._loaded(name))]

    def get(self, name: str, version: str | None = None) -> Model:
        loaded = self._loaded(name)
        if version is None or version == "":
            if not loaded:
                raise ModelNotFoundError(f"model '{name}' is not available: {self._why(name)}")
            return loaded[max(loaded)]
        if not (version.isascii() and version.isdigit()):
            raise BadRequestError(
                f"failed to get model version from specified version string '{version}'"
            )
        model = loaded.get(int(version))
        if model is None:
            served = ", ".join(self.versions(name)) or "none"
            raise ModelNotFoundError(
                f"unknown version '{version}' of model '{name}' (loaded versions: {served})"
            )
        return model

    def names(self) -> list[str]:
        return sorted({row.name for row in self._view.rows})

    # -- model control (a worker thread) -----------------------------------------------------

    def load(self, name: str, config_json: str | None = None, source: Path | None = None) -> None:
        """Ask the upstream to (re)load ``name``, then read its new state at once."""
        if source is not None:
            raise ModelLoadError("model files in a load request are not forwarded upstream")
        try:
            self._client.load(name, config_json)
        except ServingError as error:
            raise ModelLoadError(error.message) from None
        self.refresh()

    def unload(self, name: str) -> None:
        self._loaded(name)
        self._client.unload(name)
        self.refresh()

    # -- refreshing (the refresh thread, or a load) ------------------------------------------

    def start(self) -> None:
        """Refresh every ``refresh_s`` until :meth:`close`."""
        self._thread = threading.Thread(
            target=self._refresh_loop, name="cachefleet-upstream", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._refresh_s + 10)
        self._client.close()

    def refresh(self) -> None:
        """Read the upstream's state once and swap the new view in; raises ServingError when
        the upstream cannot be reached (the old view stays, the index says why)."""
        with self._refreshing:
            self._refresh()

    def _refresh(self) -> None:
        try:
            ready = self._client.server_ready()
            server = self._client.server_identity()
            rows = self._rows()
            view = self._build(server, rows)
        except ServingError as error:
            self._went_down(error.message)
            raise
        self._view = view
        self._went_down(None if ready else "the upstream server is not ready")

    def _rows(self) -> tuple[IndexRow, ...]:
        """The upstream's index, and a row per version of each ``--upstream-models`` model it
        does not list (from its metadata and readiness)."""
        rows = list(self._client.index())
        listed = {row.name for row in rows}
        for name in self._named:
            if name in listed:
                continue
            try:
                versions = self._client.model_versions(name)
            except UpstreamUnavailableError:
                raise
            except ServingError as error:
                rows.append(IndexRow(name, "", UNAVAILABLE, error.message))
                continue
            for version in versions:
                ready = self._client.model_ready(name, version)
                reason = "" if ready else "not ready on the upstream"
                rows.append(IndexRow(name, version, READY if ready else UNAVAILABLE, reason))
        return tuple(rows)

    def _refresh_loop(self) -> None:
        while not self._stop.wait(self._refresh_s):
            try:
                self.refresh()
            except ServingError:
                pass  # logged once per change by _went_down
            except Exception:  # a bug must not end the refreshes for the server's life
                logger.exception("refreshing the upstream's models failed")

    def _went_down(self, reason: str | None) -> None:
        if reason != self._down:
            if reason is None:
                logger.info("upstream %s serving: %s", self.target, self._summary())
            else:
                logger.warning("upstream %s not serving: %s", self.target, reason)
        self._down = reason

    def _build(self, server: str, rows: tuple[IndexRow, ...]) -> _View:
        old = self._view.models
        models: dict[str, dict[int, UpstreamModel]] = {}
        refused: dict[tuple[str, str], str] = {}
        for name in sorted({row.name for row in rows if row.state == READY}):
            ready = [r for r in rows if r.name == name and r.state == READY and r.version]
            for row in ready:
                if not (row.version.isascii() and row.version.isdigit()):
                    refused[(name, row.version)] = f"version {row.version!r} is not a number"
                    continue
                try:
                    model = self._model(server, row, old.get(name, {}).get(int(row.version)))
                except (ModelLoadError, ServingError) as error:
                    reason = getattr(error, "message", str(error))
                    refused[(name, row.version)] = reason
                    continue
                models.setdefault(name, {})[int(row.version)] = model
        return _View(rows, models, refused)

    def _model(self, server: str, row: IndexRow, previous: UpstreamModel | None) -> UpstreamModel:
        """The model of one READY version; ``previous`` again when its identity is the same."""
        message = self._client.model_config(row.name, row.version)
        _check_cacheable(message)
        config = to_model_config(message)
        reported = reported_identity(
            server, row.name, row.version, row.state, message.SerializeToString(deterministic=True)
        )
        files = b""
        if self._shared is not None:
            named = [spec.label_filename for spec in config.outputs if spec.label_filename]
            files = self._shared.digest(row.name, row.version, named)
        fingerprint = upstream_fingerprint(reported, files)
        if previous is not None and previous.fingerprint == fingerprint:
            return previous
        if previous is not None:
            logger.info(
                "upstream model %r version %s changed: fingerprint %s (was %s)",
                row.name, row.version, fingerprint, previous.fingerprint,
            )  # fmt: skip
        return UpstreamModel(row.name, row.version, config, fingerprint, self._client)

    def _loaded(self, name: str) -> Mapping[int, UpstreamModel]:
        view = self._view
        if name not in view.models and all(row.name != name for row in view.rows):
            raise ModelNotFoundError(f"Request for unknown model '{name}': not in the repository")
        return view.models.get(name, {})

    def _why(self, name: str) -> str:
        reasons = [e.reason for e in self.index() if e.name == name and e.reason]
        return "; ".join(reasons) or "no version ready on the upstream"

    def _summary(self) -> str:
        view = self._view
        served = [f"{name} {','.join(map(str, sorted(v)))}" for name, v in view.models.items()]
        return "; ".join(sorted(served)) or "no model ready"


def _check_cacheable(message: Any) -> None:
    """Refuse a config whose answers are not a function of one request's inputs."""
    if message.HasField("sequence_batching"):
        raise ModelLoadError("a stateful model (sequence_batching) is not served through a cache")
    if message.model_transaction_policy.decoupled:
        raise ModelLoadError("a decoupled model is not served through a cache")


async def open_upstream(settings: UpstreamSettings) -> UpstreamRepository:
    """The upstream's repository, once the upstream has answered.

    Waits for as long as the upstream takes to answer the first time (each try bounded by its
    deadline, one every ``refresh_s``), on the event loop so that a shutdown can end the wait:
    a server in front of an upstream that is not there yet does not serve (as while local
    models load) rather than serve an empty repository.
    """
    if settings.model_repository is not None and not settings.model_repository.is_dir():
        raise ModelLoadError(f"--upstream-model-repository {settings.model_repository}: no folder")
    client = await asyncio.to_thread(connect, settings)
    shared = None if settings.model_repository is None else SharedFiles(settings.model_repository)
    repository = UpstreamRepository(client, settings, shared)
    try:
        while True:
            try:
                await asyncio.to_thread(repository.refresh)
                break
            except ServingError as error:
                logger.warning("waiting for upstream %s: %s", client.target, error.message)
            await asyncio.sleep(settings.refresh_s)
    except BaseException:
        client.close()
        raise
    repository.start()
    return repository
