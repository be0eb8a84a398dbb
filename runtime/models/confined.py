"""Files a model configuration names stay inside the model's folder.

A load request may carry its own configuration (Triton's ``config`` override), so the file
names in it come from a client: ``label_filename: "/proc/self/environ"`` would read the
process environment into the labels a ``classification`` request returns, and
``default_model_filename: "../2/model.onnx"`` would serve version 2's answers as version 1.
So every name is checked twice: as written (relative, no ``..``, no absolute path, no NUL) and
once resolved (a symlink may point elsewhere inside the model repository, never out of it).
The error names the configuration field, which is what the client has to fix.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from cachefleet.runtime.models.config_message import ConfigMessage
from cachefleet.runtime.models.errors import ModelLoadError

#: Where Triton reads warm-up data files from, inside the model's folder.
WARMUP_FOLDER = "warmup"


def check_names(message: ConfigMessage) -> None:
    """Refuse a configuration that names a file outside its model's folder (before any I/O).

    Raises ModelLoadError naming the field and the offending name.
    """
    check_name("default_model_filename", message.default_model_filename)
    for key, name in sorted(message.cc_model_filenames.items()):
        check_name(f"cc_model_filenames[{key!r}]", name)
    for output in message.output:
        if output.label_filename:
            check_name(f"output {output.name!r} label_filename", output.label_filename)
    for warmup in message.model_warmup:
        for input_name, data in sorted(warmup.inputs.items()):
            if data.input_data_file:
                field = f"model_warmup {warmup.name!r} input {input_name!r} input_data_file"
                check_name(field, data.input_data_file)


def confined_file(base: Path, name: str, *, field: str, root: Path) -> Path:
    """``base / name``, checked as written and once resolved to stay under ``root``.

    ``base`` is the model's folder (or a version or warm-up folder in it); ``root`` is the
    model repository, the only place a symlink in the model's folder may lead to.
    """
    check_name(field, name)
    path = base / name
    resolved = path.resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise ModelLoadError(
            f"config field {field} ({name!r}) resolves outside the model repository "
            "(a symlink out of it is not followed)"
        )
    return path


def check_name(field: str, name: str) -> None:
    """Refuse ``name`` unless it is a relative path without ``..`` (no I/O)."""
    if not name:
        raise ModelLoadError(f"config field {field} is empty")
    path = PurePosixPath(name)
    if "\0" in name or "\\" in name or path.is_absolute() or ".." in path.parts:
        raise ModelLoadError(
            f"config field {field} ({name!r}) must name a file inside the model's folder: "
            "a relative path without '..'"
        )
