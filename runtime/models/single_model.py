"""A model repository that is one model's files, served under a name given at start.

KServe's storage initializer copies a model's files into ``/mnt/models`` and names the model
only on the command line (``--model-name={{.Name}}``): for the ``onnx`` format that is usually
a bare ``model.onnx`` (maybe with a ``config.pbtxt``), with no folder per model and no version
folder. For the ``triton`` format it is a Triton repository (a folder per model), which is
served as any other. So the name applies only when the folder holds a model's own files; a
repository of model folders keeps the names of its folders, whatever ``--model-name`` says.
"""

from __future__ import annotations

from pathlib import Path

from cachefleet.runtime.models.config import DEFAULT_MODEL_FILENAME

CONFIG_FILE = "config.pbtxt"
#: The version a bare model (its files directly in the folder, no ``1/``) is served as.
BARE_VERSION = 1


def holds_one_model(folder: Path) -> bool:
    """Whether ``folder`` is one model's files: a ``config.pbtxt`` or ``model.onnx`` in it."""
    return (folder / CONFIG_FILE).is_file() or (folder / DEFAULT_MODEL_FILENAME).is_file()


def version_folder(model_folder: Path, version: int, *, bare: bool) -> Path:
    """Where a version's files are: ``<model>/<version>``, or the model's folder when bare."""
    return model_folder if bare else model_folder / str(version)
