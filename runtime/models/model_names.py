"""A model's name is one folder of the model repository, so a client's name is checked first.

A load request names its model, and the name becomes a folder: the repository's
``<repo>/<name>``, or the private staging copy ``<temporary>/<name>`` that a load with model
files (``file:`` parameters) writes into. ``../../x`` would make either one point elsewhere,
``..`` at the staging copy's parent, and ``a/b`` at a folder that is no model. So a name is
checked as written, before anything touches the disk: one path component, not hidden (the
repository skips dot-folders, as Triton does), printable, and short enough for a file name.
"""

from __future__ import annotations

import os
from pathlib import Path

from cachefleet.runtime.models.errors import ModelLoadError

#: Longest file name component (Linux's NAME_MAX, in bytes).
NAME_MAX = 255


def check_model_name(name: str) -> None:
    """Refuse ``name`` unless it can only be a folder directly inside the repository (no I/O).

    Raises ModelLoadError saying what the name may be (the caller names the model: a name
    of hundreds of bytes is quoted once).
    """
    if not name:
        raise ModelLoadError("the model name is empty")
    if (
        name.startswith(".")
        or "/" in name
        or "\\" in name
        or not name.isprintable()
        or len(name.encode()) > NAME_MAX
    ):
        raise ModelLoadError(
            "not a model name: a model is a folder of the model repository, named by one "
            f"printable path component of at most {NAME_MAX} bytes, not starting with '.'"
        )


def shown_path(path: str | Path, model_folder: Path) -> str:
    """``path`` as a client names it, ``<model>/<path inside the model's folder>``.

    Load errors reach the client (and the repository index), and the server's own folders
    (the repository's, or the temporary copy a load with model files is staged in) are none of
    its business. A path outside ``model_folder`` keeps only its file name.
    """
    relative = os.path.relpath(path, model_folder)
    if relative == ".":
        return model_folder.name
    if relative.startswith(".."):
        return Path(path).name
    return f"{model_folder.name}/{Path(relative).as_posix()}"
