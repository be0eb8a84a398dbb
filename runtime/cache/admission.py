"""Per-model cache admission: a tier is used for a model only while it saves more than it costs.

A cache is not free. For a model that computes in tens of microseconds, a Redis round trip costs
more than the model, so even a hit is slower than no cache; with few repeats, a local lookup and
insert per request is pure overhead. So, per model version and per tier, the server keeps moving
averages (EWMAs) of what it sees:

- ``compute_s``: the time to compute one answer (a miss's run through the model's scheduler);
- per tier, ``lookup_s`` (the local tier's includes the key), ``insert_s`` (the time the insert
  takes on this server: the local ``put``, the Redis entry's encoding and send), and
  ``hit_ratio`` (the share of lookups that hit);

and the expected saving of a lookup in a tier::

    saving = hit_ratio * compute_s - (lookup_s + (1 - hit_ratio) * insert_s)

Times are measured per request, not per row: a request's lookup, insert and compute all scale
with its size, and the cache keeps whole requests (the row cache is not decided here, see
``docs/guide/cache.md``). A tier whose saving falls below zero (by a margin, so a model at the
boundary does not flap) is *skipped* for that model: neither looked up nor inserted into. A
fresh model starts admitted, so a new server caches as before, and is decided only after
``min_lookups`` lookups of the tier and ``min_computes`` computes.

A skipped tier is still *probed* on a small deterministic sample, so its figures stay measured
and the decision flips back when traffic or hardware changes:

- by content: requests whose inputs fall in a fixed sample (1 in 256, :func:`in_sample`) always
  go through the tier. Their repeats are looked up and inserted as if the tier were admitted,
  so their hit ratio is the tier's, not deflated by the skip (a request seen twice is probed
  both times or never). Small inputs are sampled by a CRC-32 of their bytes, a fraction of a
  microsecond, so that a model whose every tier is skipped does not compute its cache key at
  all; large ones by the first byte of their key's digest (a CRC of a large input costs more
  than the key, which a lookup needs anyway);
- by budget: a skipped request earns ``probe_budget`` (2 %) of the model's compute time as
  credit; when the credit covers a lookup and an insert, the request probes. Probing then costs
  at most that share of compute: an expensive model is probed nearly every request (and so flips
  back within a few requests), a cheap one rarely. At least one in ``probe_floor`` requests
  probes whatever the credit.

The other way round, a model whose requests all hit would never be computed again, and keep
the compute time of its first (cold, slow) runs: so a request now and then is computed although
a tier may hold it (``ModelAdmission.recomputes``), paid for by the same 2 % of the time its
lookups take.

Budget probes of requests that repeat rarely underestimate the hit ratio (the first sighting
was probably not inserted); the content sample is what keeps such traffic measured correctly.

``always`` measures the same figures (for the metrics) but never skips. Everything here runs on
the event loop, a few float operations per request, without locks; the metrics collector and the
statistics read the figures from elsewhere, which at worst sees one update half done.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from cachefleet.runtime.cache.key import CacheKey
from cachefleet.runtime.config.settings import CacheAdmission as AdmissionMode
from cachefleet.runtime.tensor import Tensor

#: A tier's ``name`` (``tier.Tier.name``): admission keeps figures per model and tier name, for
#: whichever tiers the server has (``factory`` lists them), and names none itself.
TierName = str


@dataclass(frozen=True, slots=True)
class AdmissionTuning:
    """The policy's constants; tests shrink them, nothing else changes them."""

    #: Lookups of a tier, and computes of the model, before the first decision.
    min_lookups: int = 32
    min_computes: int = 4
    #: Weight of a new observation in each moving average, once it has this many (1/32).
    weight: float = 1 / 32
    #: Share of the model's compute time that a skipped tier's probes may spend.
    probe_budget: float = 0.02
    #: A skipped tier is probed at least once in this many requests.
    probe_floor: int = 1024
    #: Requests whose sample byte is below this always go through (1: 1 in 256).
    key_sample: int = 1
    #: Inputs of at most this many bytes are sampled by a CRC-32 of them, larger by their key.
    crc_sample_bytes: int = 4096
    #: Relative margin around zero saving, so that a model at the boundary does not flap.
    hysteresis: float = 0.1


class MovingAverage:
    """An exponentially weighted moving average that starts as the plain mean of its first
    observations (so the first one is not weighted as if it were history)."""

    __slots__ = ("_weight", "count", "value")

    def __init__(self, weight: float) -> None:
        self.count = 0
        self.value = 0.0
        self._weight = weight

    def add(self, observed: float) -> None:
        self.count += 1
        weight = max(self._weight, 1.0 / self.count)
        self.value += weight * (observed - self.value)


def in_sample(
    inputs: Sequence[Tensor], key: Callable[[], CacheKey], tuning: AdmissionTuning
) -> bool:
    """Whether a request with ``inputs`` is in the sample that always goes through a skipped
    tier: a CRC-32 of small inputs' bytes, else the first byte of the cache key's digest
    (``key`` computes it). The same inputs are always in it or never."""
    # One pass, no generator: a model whose every tier is skipped pays this on every request.
    crc = size = 0
    limit = tuning.crc_sample_bytes
    for tensor in inputs:
        data = tensor.data
        size += len(data)
        if size > limit:
            return key().digest[0] < tuning.key_sample
        crc = zlib.crc32(data, crc)
    return crc & 0xFF < tuning.key_sample


class TierAdmission:
    """One tier of one model version: its figures, its decision, its probing."""

    __slots__ = (
        "_credit",
        "_decides",
        "_model",
        "_since_probe",
        "_tuning",
        "admitted",
        "hit_ratio",
        "insert_s",
        "lookup_s",
        "tier",
    )

    def __init__(
        self, tier: TierName, model: ModelAdmission, tuning: AdmissionTuning, *, decides: bool
    ) -> None:
        self.tier = tier
        self.admitted = True
        self.lookup_s = MovingAverage(tuning.weight)
        self.insert_s = MovingAverage(tuning.weight)
        self.hit_ratio = MovingAverage(tuning.weight)
        self._model = model
        self._credit = 0.0
        self._since_probe = 0
        self._tuning = tuning
        self._decides = decides

    def wants(self, sampled: bool) -> bool:
        """Whether this request goes through the tier: admitted, or a probe of a skipped tier
        (``sampled``: the request is in the content sample, :func:`in_sample`)."""
        if self.admitted:
            return True
        tuning = self._tuning
        if sampled:
            return True
        self._since_probe += 1
        self._credit += tuning.probe_budget * self._model.compute_s.value
        cost = self.lookup_s.value + self.insert_s.value
        if self._credit >= cost or self._since_probe >= tuning.probe_floor:
            self._credit = max(0.0, self._credit - cost)
            self._since_probe = 0
            return True
        return False

    def looked_up(self, seconds: float, hit: bool) -> None:
        """One lookup of the tier took ``seconds`` and hit or not; the decision follows."""
        self.lookup_s.add(seconds)
        self.hit_ratio.add(1.0 if hit else 0.0)
        if self._decides:
            self._decide()

    def inserted(self, seconds: float) -> None:
        self.insert_s.add(seconds)

    def expected_saving(self) -> float | None:
        """Seconds one lookup of this tier is expected to save (negative: to cost); None
        until measured."""
        if self.lookup_s.count == 0 or self._model.compute_s.count == 0:
            return None
        hit = self.hit_ratio.value
        compute = self._model.compute_s.value
        return hit * compute - (self.lookup_s.value + (1.0 - hit) * self.insert_s.value)

    def _decide(self) -> None:
        tuning = self._tuning
        if (
            self.lookup_s.count < tuning.min_lookups
            or self._model.compute_s.count < tuning.min_computes
        ):
            return
        saving = self.expected_saving()
        assert saving is not None
        margin = tuning.hysteresis * (self.lookup_s.value + self.insert_s.value)
        if self.admitted and saving < -margin:
            self.admitted = False
            self._credit = 0.0
            self._since_probe = 0
        elif not self.admitted and saving > margin:
            self.admitted = True


class ModelAdmission:
    """The figures and decisions of one model version, bound once per version (the hot path
    pays one dictionary lookup to find them)."""

    __slots__ = ("_by_name", "_credit", "_decides", "_tiers", "_tuning", "compute_s", "forgotten",
                 "model", "version")  # fmt: skip

    def __init__(
        self,
        model: str,
        version: str,
        tuning: AdmissionTuning,
        *,
        decides: bool,
        tiers: Sequence[TierName] = (),
    ) -> None:
        """``tiers``: the names of the tiers measured for the model, in the order a request
        meets them (a name not among them is measured from its first use too)."""
        self.model = model
        self.version = version
        self.compute_s = MovingAverage(tuning.weight)
        self._by_name = {name: TierAdmission(name, self, tuning, decides=decides) for name in tiers}
        self._tiers = tuple(self._by_name.values())
        self._credit = 0.0
        self._tuning = tuning
        self._decides = decides
        #: Set when the policy drops these figures (:meth:`AdmissionPolicy.forget`): whoever
        #: kept this object to skip the policy's lookup (``walk``) takes the new one.
        self.forgotten = False

    def recomputes(self) -> bool:
        """Whether this request is computed although a tier may hold its answer: the compute
        time is measured only when something computes, and a model whose requests all hit
        would keep the figure of its first (cold, slow) runs for ever. Each request earns
        ``probe_budget`` of the lookups it would make; when that covers a computation, the
        request computes. An expensive model behind cheap lookups is thus almost never
        recomputed, a cheap one behind a slow Redis every few dozen requests.

        A model never computed here although its tiers have been looked up enough to decide
        (every answer so far came from entries another server left in Redis) has no compute
        time at all, and so no decision: one request is computed to measure it, and charged
        one lookup's time, so that at most one in ``1 / probe_budget`` requests does so until
        the first measurement lands."""
        if not self._decides:
            return False
        tiers = self._tiers
        spent = 0.0
        for each in tiers:  # a loop, not a generator: every request of the model pays it
            if each.admitted:
                spent += each.lookup_s.value
        if spent == 0.0:
            return False  # no admitted tier is looked up: nothing pays for, or needs, a recompute
        if max((each.lookup_s.count for each in tiers), default=0) < self._tuning.min_lookups:
            return False  # undecided: a fresh model caches as before
        self._credit += self._tuning.probe_budget * spent
        if self.compute_s.count == 0:  # never computed here: measure it (see above)
            if self._credit >= 0.0:
                self._credit -= spent
                return True
            return False
        if self._credit >= self.compute_s.value:
            self._credit -= self.compute_s.value
            return True
        return False

    def in_sample(self, inputs: Sequence[Tensor], key: Callable[[], CacheKey]) -> bool:
        """Whether the request is in the content sample (:func:`in_sample`)."""
        return in_sample(inputs, key, self._tuning)

    def computed(self, seconds: float) -> None:
        """One answer took ``seconds`` to compute."""
        self.compute_s.add(seconds)

    def tier(self, tier: TierName) -> TierAdmission:
        """The figures of the tier named ``tier`` (a tier's ``name``), made on first use."""
        found = self._by_name.get(tier)
        if found is None:
            found = TierAdmission(tier, self, self._tuning, decides=self._decides)
            self._by_name[tier] = found
            self._tiers = tuple(self._by_name.values())
        return found


@dataclass(frozen=True, slots=True)
class AdmissionFigures:
    """What the policy knows of one tier for one model version, read-only (metrics,
    statistics, and other parts that need to know whether a model is worth caching)."""

    model: str
    version: str
    tier: TierName
    admitted: bool
    #: Seconds one lookup is expected to save; None until both lookups and computes are seen.
    expected_saving_s: float | None
    hit_ratio: float
    compute_s: float
    lookup_s: float
    insert_s: float
    lookups: int
    computes: int

    def document(self) -> dict[str, object]:
        """JSON-ready, for the statistics extension."""
        return {
            "tier": self.tier,
            "admitted": self.admitted,
            "expected_saving_ns": None
            if self.expected_saving_s is None
            else round(self.expected_saving_s * 1e9),
            "hit_ratio": self.hit_ratio,
            "compute_ns": round(self.compute_s * 1e9),
            "lookup_ns": round(self.lookup_s * 1e9),
            "insert_ns": round(self.insert_s * 1e9),
            "lookups": self.lookups,
            "computes": self.computes,
        }


class AdmissionPolicy:
    """Per model version and tier: measure, decide, probe (see the module docstring).

    The read-only interface for other parts of the server is :meth:`expected_saving`,
    :meth:`admitted` and :meth:`figures`.
    """

    def __init__(
        self,
        mode: AdmissionMode,
        tiers: tuple[TierName, ...],
        tuning: AdmissionTuning | None = None,
    ) -> None:
        """``tiers``: the tiers this server has (reported); ``always`` never skips one."""
        self.mode = mode
        self.tiers = tiers
        self._tuning = tuning or AdmissionTuning()
        self._models: dict[tuple[str, str], ModelAdmission] = {}

    def of(self, model: str, version: str) -> ModelAdmission:
        """The model version's figures, made on first use."""
        found = self._models.get((model, version))
        if found is None:
            found = ModelAdmission(
                model, version, self._tuning, decides=self.mode == "auto", tiers=self.tiers
            )
            self._models[(model, version)] = found
        return found

    def forget(self, model: str) -> None:
        """Drop every version of ``model`` (unloaded, or loaded again: measure afresh)."""
        for key in [key for key in self._models if key[0] == model]:
            self._models.pop(key).forgotten = True

    def expected_saving(
        self, model: str, tier: TierName, version: str | None = None
    ) -> float | None:
        """Seconds a lookup of ``tier`` is expected to save for ``model`` (the most measured
        version when ``version`` is None); negative when it costs; None when not yet measured."""
        chosen = self._pick(model, version)
        return None if chosen is None else chosen.tier(tier).expected_saving()

    def admitted(self, model: str, tier: TierName, version: str | None = None) -> bool:
        """Whether ``tier`` is used for ``model`` (True for a model not yet seen)."""
        chosen = self._pick(model, version)
        return True if chosen is None else chosen.tier(tier).admitted

    def figures(self, model: str, version: str | None = None) -> list[AdmissionFigures]:
        """Every tier's figures of ``model``: of ``version`` (a version not yet served is
        reported admitted, unmeasured), or of every served version when None."""
        if version is not None:
            found = self._models.get((model, version))
            if found is None:
                found = ModelAdmission(
                    model, version, self._tuning, decides=False, tiers=self.tiers
                )
            return list(self._figures([found]))
        return [each for each in self.snapshot() if each.model == model]

    def snapshot(self) -> list[AdmissionFigures]:
        """Every served model version and tier of this server."""
        return list(self._figures(list(self._models.values())))

    def _figures(self, models: list[ModelAdmission]) -> Iterator[AdmissionFigures]:
        for found in models:
            for tier in self.tiers:
                each = found.tier(tier)
                yield AdmissionFigures(
                    model=found.model,
                    version=found.version,
                    tier=tier,
                    admitted=each.admitted,
                    expected_saving_s=each.expected_saving(),
                    hit_ratio=each.hit_ratio.value,
                    compute_s=found.compute_s.value,
                    lookup_s=each.lookup_s.value,
                    insert_s=each.insert_s.value,
                    lookups=each.lookup_s.count,
                    computes=found.compute_s.count,
                )

    def _pick(self, model: str, version: str | None) -> ModelAdmission | None:
        if version is not None:
            return self._models.get((model, version))
        versions = [found for key, found in list(self._models.items()) if key[0] == model]
        return max(versions, key=lambda found: found.compute_s.count, default=None)
