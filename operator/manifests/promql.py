"""The PromQL that metric-based autoscaling reads: the runtime's own series, per fleet.

Assumes the usual Kubernetes scrape: every series carries the target labels ``namespace`` and
``pod`` (a ServiceMonitor or PodMonitor sets them, and so does the common ``kubernetes-pods``
job that reads the pods' ``prometheus.io/*`` annotations). A fleet's pods are the Deployment's:
``<name>-<pod-template-hash>-<suffix>``, both parts written in the alphabet Kubernetes uses for
them (``SafeEncodeString``: consonants and digits without vowels, 0, 1 and 3; the hash is at most
10 characters, the suffix 5). Prometheus anchors the pattern, so another workload whose name
starts with the service's name (``<name>-redis-0``, ``<name>-other-<hash>-<suffix>``) never
matches. The series are summed over the fleet; the scaler divides by the pod count
(KEDA's and the HPA's ``AverageValue``), so ``target`` is per pod.
"""

from __future__ import annotations

from cachefleet.operator.manifests.meta import Owner

#: The runtime's metric names (design section 7; the runtime's tests check they are exported).
MISSES_SERIES = "cachefleet_cache_misses_total"
PENDING_SERIES = "cachefleet_queue_pending"
#: One count per model execution; in front of a server (``spec.server``) an execution is one
#: call forwarded to it (a miss, a bypass, or a batch of misses merged into one call), so this
#: is the load that reaches the upstream. cachefleet's own name: Triton's
#: ``nv_inference_exec_count`` is exported by both containers of a kind triton pod.
FORWARDED_SERIES = "cachefleet_inference_seconds_count"
#: The window of the miss rate: two scrapes at the common 30 s interval and some to spare.
RATE_WINDOW = "2m"
#: Kubernetes' alphabet for generated name parts (k8s.io/apimachinery/pkg/util/rand).
_SAFE = "[bcdfghjklmnpqrstvwxz2456789]"
#: The Pods metric names an HPA asks the metrics adapter for (docs/guide/autoscaling.md has the
#: prometheus-adapter rules that serve them).
ADAPTER_METRICS = {
    "misses": "cachefleet_cache_misses_per_second",
    "queue": PENDING_SERIES,
    "forwarded": "cachefleet_forwarded_per_second",
}


def pod_selector(owner: Owner) -> str:
    """The label matchers of the fleet's runtime pods (the name is a DNS-1035 label, checked
    by :func:`~cachefleet.operator.manifests.names.check_name`: nothing in it needs escaping)."""
    pods = f"{owner.name}-{_SAFE}{{1,10}}-{_SAFE}{{5}}"
    return f'namespace="{owner.namespace}",pod=~"{pods}"'


def misses_per_second(owner: Owner) -> str:
    """Cache misses per second over the fleet: the requests the model actually ran."""
    return f"sum(rate({MISSES_SERIES}{{{pod_selector(owner)}}}[{RATE_WINDOW}]))"


def forwarded_per_second(owner: Owner) -> str:
    """Calls forwarded to the upstream per second over the fleet: the load past the cache."""
    return f"sum(rate({FORWARDED_SERIES}{{{pod_selector(owner)}}}[{RATE_WINDOW}]))"


def pending_requests(owner: Owner) -> str:
    """Requests accepted and not yet answered, over the fleet."""
    return f"sum({PENDING_SERIES}{{{pod_selector(owner)}}})"


def scaling_query(metric: str, owner: Owner) -> str:
    if metric == "misses":
        return misses_per_second(owner)
    if metric == "queue":
        return pending_requests(owner)
    if metric == "forwarded":
        return forwarded_per_second(owner)
    raise ValueError(f"no PromQL for metric {metric!r}")
