"""Tests on a real Kubernetes control plane (``bash scripts/test-cluster``)."""
