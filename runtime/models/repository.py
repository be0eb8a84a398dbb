"""The Triton-layout model repository: load models at start (and on request), serve what loaded.

A model that fails to load is listed in the index as UNAVAILABLE with its reason, and the others
still serve, as in Triton. Loading happens in :func:`load_repository` and
:meth:`LocalModelRepository.load`, never at import.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnxruntime as ort
from google.protobuf import json_format

from cachefleet.runtime.config import ModelSettings
from cachefleet.runtime.errors import BadRequestError, ModelNotFoundError
from cachefleet.runtime.models.config import (
    complete_config,
    config_document,
    log_ignored_fields,
    parse_config,
    to_model_config,
)
from cachefleet.runtime.models.config_message import ConfigMessage, new_model_config
from cachefleet.runtime.models.confined import check_names, confined_file
from cachefleet.runtime.models.errors import ModelLoadError
from cachefleet.runtime.models.fingerprint import files_digest, fingerprint
from cachefleet.runtime.models.graph import (
    DERIVED_MAX_BATCH_SIZE,
    GraphSignature,
    check_config,
    derive_config,
)
from cachefleet.runtime.models.model_names import check_model_name, shown_path
from cachefleet.runtime.models.onnx_backend import OnnxModel, open_session, signature_of
from cachefleet.runtime.models.placement import runs_inline
from cachefleet.runtime.models.providers import ExecutionPlan, plan_execution
from cachefleet.runtime.models.scheduling import scheduling_policy
from cachefleet.runtime.models.single_model import (
    BARE_VERSION,
    CONFIG_FILE,
    holds_one_model,
    version_folder,
)
from cachefleet.runtime.models.types import Model, ModelConfig, ModelIndexEntry
from cachefleet.runtime.models.versions import select_versions, version_folders

logger = logging.getLogger(__name__)

READY = "READY"
UNAVAILABLE = "UNAVAILABLE"
#: The reason shown for a model that is in the repository but not loaded (explicit mode).
NOT_LOADED = "unloaded"


@dataclass
class _ModelState:
    """One model folder: its loaded versions and why the others are not."""

    loaded: dict[int, OnnxModel]
    failed: dict[int | None, str]  # None: the whole model failed before any version


class LocalModelRepository:
    """A loaded repository.

    Reads (``get``, ``index``) happen on the event loop while ``load`` may run in a worker
    thread: a model's state is built aside and swapped in with one dict assignment, so a reader
    sees the old state or the new one, never a half-loaded model.
    """

    def __init__(
        self,
        path: Path,
        models: Mapping[str, _ModelState],
        settings: ModelSettings | None = None,
        *,
        single: str | None = None,
    ) -> None:
        self.path = path
        self._models = dict(models)
        self._settings = settings or ModelSettings()
        #: The one model's name when ``path`` is that model's files (see ``single_model``).
        self._single = single

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
        if not (version.isascii() and version.isdigit()):
            # Worded as Triton words it (its example clients check the message).
            raise BadRequestError(
                f"failed to get model version from specified version string '{version}'"
            )
        number = int(version)
        if number in state.loaded:
            return state.loaded[number]
        if number in state.failed:
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

    def names(self) -> list[str]:
        """Every model folder of the repository on disk, loaded or not."""
        return [self._single] if self._single is not None else _model_folders(self.path)

    def load(self, name: str, config_json: str | None = None, source: Path | None = None) -> None:
        """(Re)load model ``name`` from its folder, optionally with a JSON config instead of
        its config.pbtxt (Triton's load override), or from ``source``: a model folder staged
        elsewhere (a load request's own files), whose files are read here and not after.
        Blocking: call it off the event loop.

        Raises ModelLoadError with the reason when no version loads; the model's previous
        state (serving or not) is then kept, as Triton keeps a model whose reload failed.
        """
        check_model_name(name)
        single = source is None and name == self._single
        folder = source if source is not None else self.path if single else self.path / name
        if not folder.is_dir():
            raise ModelLoadError(f"no model folder {name!r} in the model repository")
        state = _load_model(folder, self._settings, config_json, name=name, single=single)
        if not state.loaded:
            reasons = "; ".join(state.failed.values()) or "no version loaded"
            raise ModelLoadError(reasons)
        self._models[name] = state
        for version, reason in state.failed.items():
            logger.error("model %r %s: UNAVAILABLE: %s", name, version or "", reason)

    def unload(self, name: str) -> None:
        """Stop serving every version of ``name``; requests already holding it finish."""
        self._state(name)
        self._models[name] = _ModelState(loaded={}, failed={None: NOT_LOADED})

    def _state(self, name: str) -> _ModelState:
        state = self._models.get(name)
        if state is None:
            # Worded as Triton words it: its example clients check the message's start.
            raise ModelNotFoundError(f"Request for unknown model '{name}': not in the repository")
        return state


def load_repository(
    path: Path, settings: ModelSettings, only: Collection[str] | None = None
) -> LocalModelRepository:
    """Load every model folder under ``path`` (or only those named in ``only``; the others
    are listed as not loaded, and a name with no folder is listed UNAVAILABLE).

    Raises ModelLoadError only when ``path`` itself is unusable; a broken model is listed.
    """
    if not path.is_dir():
        raise ModelLoadError(f"model repository {path} is not a directory")
    if settings.name is not None:
        if holds_one_model(path):
            return _load_single(path, settings, only)
        logger.info(
            "--model-name %r not applied: %s holds model folders, served under their names",
            settings.name,
            path,
        )
    folders = _model_folders(path)
    models = {
        name: _load_model(path / name, settings)
        if only is None or name in only
        else _ModelState(loaded={}, failed={None: NOT_LOADED})
        for name in folders
    }
    for name in sorted(set(only or ()) - set(folders)):
        models[name] = _ModelState(loaded={}, failed={None: "no such folder in the repository"})
    repository = LocalModelRepository(path, models, settings)
    for entry in repository.index():
        if entry.state == UNAVAILABLE and entry.reason != NOT_LOADED:
            logger.error("model %r %s: UNAVAILABLE: %s", entry.name, entry.version, entry.reason)
    waiting = sorted(name for name, state in models.items() if state.failed == {None: NOT_LOADED})
    if waiting:
        logger.info("not loaded until asked (explicit model control): %s", ", ".join(waiting))
    return repository


def _load_single(
    path: Path, settings: ModelSettings, only: Collection[str] | None
) -> LocalModelRepository:
    """``path`` as one model's files, served as ``settings.name`` (KServe's layout)."""
    name = settings.name or ""
    check_model_name(name)
    if only is None or name in only:
        state = _load_model(path, settings, name=name, single=True)
    else:
        state = _ModelState(loaded={}, failed={None: NOT_LOADED})
    for version, reason in state.failed.items():
        if reason != NOT_LOADED:
            logger.error("model %r %s: UNAVAILABLE: %s", name, version or "", reason)
    return LocalModelRepository(path, {name: state}, settings, single=name)


def _model_folders(path: Path) -> list[str]:
    return sorted(
        folder.name
        for folder in path.iterdir()
        if folder.is_dir() and not folder.name.startswith(".")
    )


def _load_model(
    folder: Path,
    settings: ModelSettings,
    config_json: str | None = None,
    *,
    name: str | None = None,
    single: bool = False,
) -> _ModelState:
    """Load the model in ``folder`` (named ``name``, else by its folder). ``single``: the
    folder is the whole repository, so symlinks stay in it, and files with no version folder
    are version 1 (a bare model)."""
    state = _ModelState(loaded={}, failed={})
    available = version_folders(folder)
    bare = single and not available
    try:
        message = _read_config(folder, config_json, name or folder.name)
        check_names(message)
        chosen, missing = select_versions(message, [BARE_VERSION] if bare else available)
        plan = plan_execution(config_document(message), settings, ort.get_available_providers())
    except ModelLoadError as error:
        state.failed[None] = str(error)
        return state
    for version in missing:
        state.failed[version] = f"version folder {version}/ named by version_policy is missing"
    root = folder if single else folder.parent
    loader = _VersionLoader(folder, message, plan, root=root, bare=bare)
    for version in chosen:
        try:
            state.loaded[version] = loader.load(version)
        except ModelLoadError as error:
            state.failed[version] = str(error)
    return state


class _VersionLoader:
    """Loads a model's versions; the config is settled by the first version that opens."""

    def __init__(
        self, folder: Path, message: ConfigMessage, plan: ExecutionPlan, *, root: Path, bare: bool
    ) -> None:
        self._folder = folder
        self._root = root
        self._bare = bare
        self._message = message
        self._plan = plan
        self._config: ModelConfig | None = None
        self._labels: Mapping[str, Sequence[str]] = {}

    def load(self, version: int) -> OnnxModel:
        files_folder = version_folder(self._folder, version, bare=self._bare)
        model_file = confined_file(
            files_folder,
            self._message.default_model_filename,
            field="default_model_filename",
            root=self._root,
        )
        if not model_file.is_file():
            where = "the model's folder" if self._bare else f"version folder {version}/"
            raise ModelLoadError(f"{model_file.name} not found in {where}")
        named = [spec.label_filename for spec in self._message.output if spec.label_filename]
        try:
            before = files_digest(self._folder, files_folder, named)
        except ModelLoadError:
            before = None  # an unreadable file is reported below, after the config's own errors
        session = open_session(model_file, self._plan, shown=shown_path(model_file, self._folder))
        signature = signature_of(session)
        config = self._config or self._settle_config(signature)
        check_config(config, signature)
        # Hashed again once loaded: a file replaced while the session read it would otherwise
        # leave a fingerprint of files other than those answering.
        files = files_digest(self._folder, files_folder, named)
        if files != before:
            raise ModelLoadError(f"files of version folder {version}/ changed while it loaded")
        fingerprint_hex = fingerprint(self._message.SerializeToString(deterministic=True), files)
        logger.info(
            "model %r version %d: READY on %s, fingerprint %s",
            config.name,
            version,
            session.get_providers(),
            fingerprint_hex,
        )
        model = OnnxModel(str(version), config, session, self._labels, fingerprint_hex)
        model.quick = runs_inline(model, file_bytes=model_file.stat().st_size)
        return model

    def _settle_config(self, signature: GraphSignature) -> ModelConfig:
        if not self._message.input or not self._message.output:
            _complete_tensors(self._message, signature)
        config = to_model_config(self._message)
        scheduling_policy(config)  # refuse a bad dynamic_batching block at load, not per request
        self._labels = _read_labels(self._folder, config, root=self._root)
        log_ignored_fields(self._message)
        self._config = config
        return config


def _read_config(folder: Path, config_json: str | None, name: str) -> ConfigMessage:
    """The folder's config.pbtxt (or ``config_json``, Triton's load override), completed with
    Triton's defaults for model ``name``; empty if there is neither."""
    path = folder / CONFIG_FILE
    if config_json is not None:
        message = _parse_json_config(config_json, name)
    elif path.is_file():
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as error:
            raise ModelLoadError(f"{shown_path(path, folder)}: {_reason(error)}") from None
        message = parse_config(text, source=f"{name}/{CONFIG_FILE}")
    else:
        logger.info("model %r: no %s, deriving the config from the model", name, CONFIG_FILE)
        message = new_model_config()
    complete_config(message, name)
    return message


def _parse_json_config(text: str, name: str) -> ConfigMessage:
    """A ModelConfig from its JSON form, as a load request's ``config`` parameter carries it."""
    message = new_model_config()
    try:
        json_format.Parse(text, message)
    except json_format.ParseError as error:
        raise ModelLoadError(
            f"model {name!r}: the config override is not a ModelConfig: {error}"
        ) from None
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


def _read_labels(folder: Path, config: ModelConfig, *, root: Path) -> dict[str, list[str]]:
    """Each output's label file, one label a line, read once at load."""
    labels: dict[str, list[str]] = {}
    for spec in config.outputs:
        if spec.label_filename:
            field = f"output {spec.name!r} label_filename"
            path = confined_file(folder, spec.label_filename, field=field, root=root)
            try:
                labels[spec.name] = path.read_text().splitlines()
            except (OSError, UnicodeDecodeError) as error:
                raise ModelLoadError(
                    f"model {config.name!r}: label file of output {spec.name!r} "
                    f"({spec.label_filename!r}): {_reason(error)}"
                ) from None
    return labels


def _reason(error: OSError | UnicodeDecodeError) -> str:
    """Why a file could not be read, without its path (an OSError's text holds the server's)."""
    if isinstance(error, OSError):
        return error.strerror or type(error).__name__
    return f"not UTF-8 text ({error.reason})"
