"""Operator test support: the kmock cluster and its fixtures, the CRD schema, API-server rules."""
