"""Delivery checks: chart, generated manifests, Dockerfile, GitOps health checks, docs."""
