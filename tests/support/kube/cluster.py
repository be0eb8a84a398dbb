"""The emulator the operator tests run against: it lives in the repository's harness (not in the
wheel), shared with ``python -m harness.operator_scale``."""

from harness.kube_emulator import APPLY, CIS, RESOURCES, VERBS, Cluster, InvalidError

__all__ = ["APPLY", "CIS", "RESOURCES", "VERBS", "Cluster", "InvalidError"]
