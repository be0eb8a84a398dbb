"""The repository's Dockerfile, parsed into its stages (no Docker engine here)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from dockerfile_parse import DockerfileParser

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def values(self, instruction: str) -> list[str]:
        return [value for name, value in self.instructions if name == instruction]


def parse_stages() -> list[Stage]:
    """The stages in order, each base image with the global ARG defaults substituted."""
    parser = DockerfileParser(path=str(REPO / "Dockerfile"))
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for item in parser.structure:
        instruction, value = item["instruction"], item["value"]
        if instruction == "ARG" and not stages and "=" in value:
            key, default = value.split("=", 1)
            args[key] = default
        elif instruction == "FROM":
            image, _, name = value.partition(" AS ")
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image.strip())
            stages.append(Stage(name.strip(), base))
        elif stages:
            stages[-1].instructions.append((instruction, value))
    return stages
