"""Writes the sample model repository in Triton's layout: ``<model>/config.pbtxt`` and
``<model>/1/model.onnx``, plus label files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx

from cachefleet.runtime.samples.arithmetic import (
    arithmetic_config,
    build_simple,
    build_simple_int8,
    build_simple_string,
)
from cachefleet.runtime.samples.densenet import (
    DENSENET_BATCH_CONFIG,
    DENSENET_CONFIG,
    build_densenet,
    build_densenet_batch,
    densenet_labels,
)
from cachefleet.runtime.samples.identity import IDENTITY_CONFIG, build_simple_identity


@dataclass(frozen=True)
class Sample:
    """One sample model: how to build it, its config, and any extra files beside the config."""

    name: str
    build: Callable[[], onnx.ModelProto]
    config: str
    extra_files: Callable[[], dict[str, str]] = dict


SAMPLES: tuple[Sample, ...] = (
    Sample("simple", build_simple, arithmetic_config("simple", "TYPE_INT32")),
    Sample("simple_string", build_simple_string, arithmetic_config("simple_string", "TYPE_STRING")),
    Sample("simple_int8", build_simple_int8, arithmetic_config("simple_int8", "TYPE_INT8")),
    Sample("simple_identity", build_simple_identity, IDENTITY_CONFIG),
    Sample(
        "densenet_onnx",
        build_densenet,
        DENSENET_CONFIG,
        lambda: {"densenet_labels.txt": "\n".join(densenet_labels()) + "\n"},
    ),
    Sample(
        "densenet_batch",
        build_densenet_batch,
        DENSENET_BATCH_CONFIG,
        lambda: {"densenet_labels.txt": "\n".join(densenet_labels()) + "\n"},
    ),
)


def write_sample(root: Path, sample: Sample, version: int = 1) -> Path:
    """Write one sample under ``root``; returns the model's folder."""
    folder = root / sample.name
    (folder / str(version)).mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(sample.config)
    for filename, text in sample.extra_files().items():
        (folder / filename).write_text(text)
    (folder / str(version) / "model.onnx").write_bytes(sample.build().SerializeToString())
    return folder


def write_samples(root: Path, names: tuple[str, ...] | None = None) -> list[Path]:
    """Write the samples named (all by default) under ``root``; returns their folders."""
    known = {sample.name: sample for sample in SAMPLES}
    unknown = sorted(set(names or ()) - set(known))
    if unknown:
        raise KeyError(f"unknown sample(s) {unknown}; known: {sorted(known)}")
    chosen = [known[name] for name in names] if names else list(SAMPLES)
    root.mkdir(parents=True, exist_ok=True)
    return [write_sample(root, sample) for sample in chosen]
