"""Which version folders of a model to load, by the config's ``version_policy`` (as Triton)."""

from __future__ import annotations

from pathlib import Path

from cachefleet.runtime.models.config_message import ConfigMessage
from cachefleet.runtime.models.errors import ModelLoadError


def version_folders(model_folder: Path) -> list[int]:
    """The subfolders named by a plain number (``1``, ``12``), ascending; others are ignored."""
    return sorted(
        int(child.name)
        for child in model_folder.iterdir()
        if child.is_dir() and _plain_number(child.name)
    )


def _plain_number(name: str) -> bool:
    """``12``, not ``012`` nor ``²`` (which ``str.isdigit`` takes and ``int`` refuses)."""
    return name.isascii() and name.isdigit() and str(int(name)) == name


def select_versions(config: ConfigMessage, available: list[int]) -> tuple[list[int], list[int]]:
    """``(to_load, missing)``: the versions the policy picks, and specific ones not on disk."""
    policy = config.version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        chosen, missing = list(available), []
    elif choice == "specific":
        wanted = sorted({int(version) for version in policy.specific.versions})
        chosen = [version for version in wanted if version in available]
        missing = [version for version in wanted if version not in available]
    else:
        count = policy.latest.num_versions if choice == "latest" else 1
        if count < 1:
            raise ModelLoadError(f"model {config.name!r}: latest num_versions must be at least 1")
        chosen, missing = available[-count:], []
    if not chosen and not missing:
        raise ModelLoadError(f"model {config.name!r}: no version folders (like 1/) to load")
    return chosen, missing
