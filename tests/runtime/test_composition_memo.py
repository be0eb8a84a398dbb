"""The runtime has one answer memo where a local tier can vouch for its answers, an eighth of the
local tier's bound in all (HTTP and gRPC share it), and none otherwise; the HTTP answers use
it exactly when it is there."""

from __future__ import annotations

from pathlib import Path

import pytest

from cachefleet.runtime.composition import Runtime
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.http.infer_answers import MemoizedAnswers, answers_for


def settings(repository: Path, mode: str) -> RuntimeSettings:
    return RuntimeSettings.model_validate(
        {"models": {"repository": str(repository), "load_models": ["simple"],
                    "control_mode": "explicit"},
         "cache": {"mode": mode, "local_size_bytes": 8 << 20}}
    )  # fmt: skip


async def test_a_local_tier_gets_one_memo_of_an_eighth_of_its_bound(
    model_repository: Path,
) -> None:
    async with Runtime.open(settings(model_repository, "local")) as runtime:
        assert runtime.memo is not None
        assert runtime.memo.max_bytes == 1 << 20
        answers = answers_for(runtime)
        assert isinstance(answers, MemoizedAnswers)
        assert answers.memo is runtime.memo_answers
        assert runtime.memo_answers is not None
        assert runtime.memo_answers.memo is runtime.memo


@pytest.mark.parametrize("mode", ["none"])
async def test_a_server_without_a_local_tier_memoizes_nothing(
    model_repository: Path, mode: str
) -> None:
    async with Runtime.open(settings(model_repository, mode)) as runtime:
        assert runtime.memo is None
        assert runtime.memo_answers is None
        assert not isinstance(answers_for(runtime), MemoizedAnswers)
