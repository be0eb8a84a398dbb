"""The emulator the operator tests run against: it lives in the bench package, shared with
``python -m cachefleet.bench.operator_scale``."""

from cachefleet.bench.kube_emulator import APPLY, CIS, RESOURCES, VERBS, Cluster, InvalidError

__all__ = ["APPLY", "CIS", "RESOURCES", "VERBS", "Cluster", "InvalidError"]
