"""The HTTP memo of rendered responses follows cache admission: it holds only local hits, so
while admission skips the local tier for a model its bodies are not hashed for it, and once
the tier is admitted again they are."""

from __future__ import annotations

from pathlib import Path

from cachefleet.runtime.cache.api import CacheDirectives
from cachefleet.runtime.composition import Runtime
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.http.infer_answers import MemoizedAnswers, answers_for

US = 1e-6
LOOKUP = CacheDirectives(lookup=True, store=True)


def settings(repository: Path, mode: str = "local") -> RuntimeSettings:
    return RuntimeSettings.model_validate(
        {"models": {"repository": str(repository), "load_models": ["simple"],
                    "control_mode": "explicit"},
         "cache": {"mode": mode}}
    )  # fmt: skip


def feed(runtime: Runtime, *, compute_s: float, lookup_s: float, hit: bool) -> None:
    """Give the policy a long history of ``simple`` 1's local tier."""
    model = runtime.admission.of("simple", "1")
    for _ in range(1_000):
        model.computed(compute_s)
        model.local.inserted(lookup_s)
        model.local.looked_up(lookup_s, hit)


async def test_bodies_are_hashed_only_while_the_local_tier_is_admitted(
    model_repository: Path,
) -> None:
    async with Runtime.open(settings(model_repository)) as runtime:
        answers = answers_for(runtime)
        assert isinstance(answers, MemoizedAnswers)
        assert answers.hasher("simple", None, None, LOOKUP) is not None, "fresh: admitted"

        feed(runtime, compute_s=1 * US, lookup_s=1_000 * US, hit=False)
        assert not runtime.admission.admitted("simple", "local", "1")
        assert answers.hasher("simple", None, None, LOOKUP) is None
        assert answers.hasher("simple", "1", 12, LOOKUP) is None

        feed(runtime, compute_s=1_000 * US, lookup_s=1 * US, hit=True)
        assert runtime.admission.admitted("simple", "local", "1")
        assert answers.hasher("simple", None, None, LOOKUP) is not None


async def test_a_server_without_a_local_tier_memoizes_nothing(model_repository: Path) -> None:
    async with Runtime.open(settings(model_repository, "none")) as runtime:
        assert not isinstance(answers_for(runtime), MemoizedAnswers)
