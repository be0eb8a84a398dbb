"""The models of the batching run: the samples, and variants that differ in one config block."""

from __future__ import annotations

import re
from pathlib import Path

ROW_CACHE = 'parameters { key: "cachefleet.row_cache" value: { string_value: "true" } }'
#: A short queue delay, as ``densenet_batch`` has: a miss waits at most 2 ms for company.
DYNAMIC_BATCHING = "dynamic_batching { max_queue_delay_microseconds: 2000 }"
_BATCHING_BLOCK = re.compile(r"^dynamic_batching \{[^}]*\}\n", re.MULTILINE)
_ROW_CACHE_LINE = re.compile(r'^parameters \{ key: "cachefleet\.row_cache".*\n', re.MULTILINE)


def write_variants(samples: Path) -> dict[str, str]:
    """Add the variants beside the samples; returns variant -> the sample it is made from.

    - ``densenet_unbatched``: ``densenet_batch`` without ``dynamic_batching`` (row cache off);
    - ``densenet_whole``: ``densenet_batch`` with the row cache off (whole-request cache only);
    - ``simple_batched``: ``simple`` with ``dynamic_batching``;
    - ``simple_rows`` / ``simple_whole``: batched ``simple`` with and without the row cache.
    """
    densenet = (samples / "densenet_batch" / "config.pbtxt").read_text()
    simple = (samples / "simple" / "config.pbtxt").read_text()
    no_rows = _ROW_CACHE_LINE.sub("", densenet)
    variants = {
        "densenet_unbatched": ("densenet_batch", _BATCHING_BLOCK.sub("", no_rows)),
        "densenet_whole": ("densenet_batch", no_rows),
        "simple_batched": ("simple", f"{simple}{DYNAMIC_BATCHING}\n"),
        "simple_rows": ("simple", f"{simple}{DYNAMIC_BATCHING}\n{ROW_CACHE}\n"),
        "simple_whole": ("simple", f"{simple}{DYNAMIC_BATCHING}\n"),
    }
    for name, (sample, config) in variants.items():
        _write(samples, sample, name, config)
    return {name: sample for name, (sample, _) in variants.items()}


def _write(samples: Path, sample: str, name: str, config: str) -> None:
    folder = samples / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "1" / "model.onnx").unlink(missing_ok=True)
    (folder / "1" / "model.onnx").symlink_to(samples / sample / "1" / "model.onnx")
    for extra in (samples / sample).glob("*.txt"):
        target = folder / extra.name
        target.unlink(missing_ok=True)
        target.symlink_to(extra)
    (folder / "config.pbtxt").write_text(config.replace(f'name: "{sample}"', f'name: "{name}"'))
