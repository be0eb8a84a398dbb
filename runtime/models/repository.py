"""The Triton-layout model repository: load every model at start, serve what loaded.

A model that fails to load is listed in the index as UNAVAILABLE with its reason, and the others
still serve, as in Triton. Loading happens in :func:`load_repository`, never at import.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnxruntime as ort

from cachefleet.runtime.config import ModelSettings
from cachefleet.runtime.errors import ModelNotFoundError
from cachefleet.runtime.models.config import (
    complete_config,
    config_document,
    log_ignored_fields,
    parse_config,
    to_model_config,
)
from cachefleet.runtime.models.errors import ModelLoadError
from cachefleet.runtime.models.graph import (
    DERIVED_MAX_BATCH_SIZE,
    GraphSignature,
    check_config,
    derive_config,
)
from cachefleet.runtime.models.onnx_backend import OnnxModel, open_session, signature_of
from cachefleet.runtime.models.providers import ExecutionPlan, plan_execution
from cachefleet.runtime.models.schema import ConfigMessage, new_model_config
from cachefleet.runtime.models.types import Model, ModelConfig, ModelIndexEntry
from cachefleet.runtime.models.versions import select_versions, version_folders

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.pbtxt"
READY = "READY"
UNAVAILABLE = "UNAVAILABLE"


@dataclass
class _ModelState:
    """One model folder: its loaded versions and why the others are not."""

    loaded: dict[int, OnnxModel]
    failed: dict[int | None, str]  # None: the whole model failed before any version


class LocalModelRepository:
    """A loaded repository. Read-only after loading, so safe to share between threads."""

    def __init__(self, path: Path, models: Mapping[str, _ModelState]) -> None:
        self.path = path
        self._models = dict(models)

    def index(self) -> list[ModelIndexEntry]:
        entries: list[ModelIndexEntry] = []
        for name in sorted(self._models):
            state = self._models[name]
            for version in sorted(state.loaded):
                entries.append(ModelIndexEntry(name, str(version), READY))
            for failed, reason in sorted(state.failed.items(), key=lambda item: item[0] or 0):
                label = "" if failed is None else str(failed)
                entries.append(ModelIndexEntry(name, label, UNAVAILABLE, reason))
        return entries

    def versions(self, name: str) -> list[str]:
        return [str(version) for version in sorted(self._state(name).loaded)]

    def get(self, name: str, version: str | None = None) -> Model:
        state = self._state(name)
        if version is None or version == "":
            if not state.loaded:
                reasons = "; ".join(state.failed.values()) or "no version loaded"
                raise ModelNotFoundError(f"model '{name}' is not available: {reasons}")
            return state.loaded[max(state.loaded)]
        number = int(version) if version.isdigit() else None
        if number is not None and number in state.loaded:
            return state.loaded[number]
        if number is not None and number in state.failed:
            raise ModelNotFoundError(
                f"model '{name}' version {version} is not available: {state.failed[number]}"
            )
        loaded = ", ".join(self.versions(name)) or "none"
        raise ModelNotFoundError(
            f"unknown version '{version}' of model '{name}' (loaded versions: {loaded})"
        )

    def close(self) -> None:
        """Drop every session; ONNX Runtime frees a session when its last reference goes."""
        self._models.clear()

    def _state(self, name: str) -> _ModelState:
        state = self._models.get(name)
        if state is None:
            raise ModelNotFoundError(f"unknown model '{name}'")
        return state


def load_repository(path: Path, settings: ModelSettings) -> LocalModelRepository:
    """Load every model folder under ``path``.

    Raises ModelLoadError only when ``path`` itself is unusable; a broken model is listed.
    """
    if not path.is_dir():
        raise ModelLoadError(f"model repository {path} is not a directory")
    models = {
        folder.name: _load_model(folder, settings)
        for folder in sorted(path.iterdir())
        if folder.is_dir() and not folder.name.startswith(".")
    }
    repository = LocalModelRepository(path, models)
    for entry in repository.index():
        if entry.state == UNAVAILABLE:
            logger.error("model %r %s: UNAVAILABLE: %s", entry.name, entry.version, entry.reason)
    return repository


def _load_model(folder: Path, settings: ModelSettings) -> _ModelState:
    state = _ModelState(loaded={}, failed={})
    try:
        message = _read_config(folder)
        chosen, missing = select_versions(message, version_folders(folder))
        plan = plan_execution(config_document(message), settings, ort.get_available_providers())
    except ModelLoadError as error:
        state.failed[None] = str(error)
        return state
    for version in missing:
        state.failed[version] = f"version folder {version}/ named by version_policy is missing"
    loader = _VersionLoader(folder, message, plan)
    for version in chosen:
        try:
            state.loaded[version] = loader.load(version)
        except ModelLoadError as error:
            state.failed[version] = str(error)
    return state


class _VersionLoader:
    """Loads a model's versions; the config is settled by the first version that opens."""

    def __init__(self, folder: Path, message: ConfigMessage, plan: ExecutionPlan) -> None:
        self._folder = folder
        self._message = message
        self._plan = plan
        self._config: ModelConfig | None = None
        self._labels: Mapping[str, Sequence[str]] = {}

    def load(self, version: int) -> OnnxModel:
        model_file = self._folder / str(version) / self._message.default_model_filename
        if not model_file.is_file():
            raise ModelLoadError(f"{model_file.name} not found in version folder {version}/")
        session = open_session(model_file, self._plan)
        signature = signature_of(session)
        config = self._config or self._settle_config(signature)
        check_config(config, signature)
        logger.info(
            "model %r version %d: READY on %s", config.name, version, session.get_providers()
        )
        return OnnxModel(str(version), config, session, self._labels)

    def _settle_config(self, signature: GraphSignature) -> ModelConfig:
        if not self._message.input or not self._message.output:
            _complete_tensors(self._message, signature)
        config = to_model_config(self._message)
        self._labels = _read_labels(self._folder, config)
        log_ignored_fields(self._message)
        self._config = config
        return config


def _read_config(folder: Path) -> ConfigMessage:
    """The folder's config.pbtxt, completed with Triton's defaults; empty if there is none."""
    path = folder / CONFIG_FILE
    if path.is_file():
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as error:
            raise ModelLoadError(f"{path}: {error}") from None
        message = parse_config(text, source=f"{folder.name}/{CONFIG_FILE}")
    else:
        logger.info("model %r: no %s, deriving the config from the model", folder.name, CONFIG_FILE)
        message = new_model_config()
    complete_config(message, folder.name)
    return message


def _complete_tensors(message: ConfigMessage, signature: GraphSignature) -> None:
    """Fill the inputs or outputs a config leaves out from the graph, as Triton's auto-complete.

    A config that declares no tensors and no max_batch_size gets 4 if the graph can batch;
    otherwise the config's max_batch_size decides how the derived dims are read.
    """
    if not message.input and not message.output and message.max_batch_size == 0:
        message.max_batch_size = DERIVED_MAX_BATCH_SIZE if signature.can_batch() else 0
    derived = derive_config(message.name, signature, batching=message.max_batch_size > 0)
    if not message.input:
        message.input.extend(derived.input)
    if not message.output:
        message.output.extend(derived.output)


def _read_labels(folder: Path, config: ModelConfig) -> dict[str, list[str]]:
    """Each output's label file, one label a line, read once at load."""
    labels: dict[str, list[str]] = {}
    for spec in config.outputs:
        if spec.label_filename:
            path = folder / spec.label_filename
            try:
                labels[spec.name] = path.read_text().splitlines()
            except (OSError, UnicodeDecodeError) as error:
                raise ModelLoadError(
                    f"model {config.name!r}: label file of output {spec.name!r}: {error}"
                ) from None
    return labels
