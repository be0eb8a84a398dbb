"""The managed Redis: StatefulSet, Services, ConfigMap, auth Secret, PDB and NetworkPolicy.

The password reaches ``redis-server`` as a config line on its standard input, never on its
command line (``password_on_stdin``). Releases up to 0.3.0 passed ``--requirepass``; a Redis
started so keeps that form until its pod is replaced, which the reconcile layer defers to the
pod's own next restart (``reconcile/redis_restarts.py``) with the help of the two pure functions
at the end of this module: what the previous form looked like, and whether a container uses it.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Mapping
from typing import Any

from cachefleet.operator.manifests import meta
from cachefleet.operator.manifests.meta import REDIS_PORT, Owner
from cachefleet.operator.manifests.operator_access import operator_peer
from cachefleet.operator.manifests.redis_conf import render_redis_conf, restart_settings
from cachefleet.operator.manifests.security import container_security, pod_security
from cachefleet.operator.manifests.spec import SecretKeyRef, ServiceSpec

COMPONENT = "redis"
REDIS_USER_ID = 999  # the redis user of the official images
CONF_DIR = "/etc/redis"
PASSWORD_ENV = "REDIS_PASSWORD"
TMP_SIZE_LIMIT = "64Mi"
#: How the container starts Redis, before the password is given.
START = f"exec redis-server {CONF_DIR}/redis.conf"
#: How releases up to 0.3.0 gave the password: on the command line, where anyone on the node may
#: read it (``/proc/PID/cmdline``, ``ps``).
COMMAND_LINE_PASSWORD = f' --requirepass "${PASSWORD_ENV}"'
#: The update strategy rendered: the StatefulSet controller's default, with the partition named
#: so that the operator owns ``rollingUpdate`` under server-side apply and a switch to
#: ``OnDelete`` (which forbids it) drops it.
ROLLING_UPDATE: dict[str, Any] = {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}


def password_ref(spec: ServiceSpec, owner: Owner) -> SecretKeyRef | None:
    """Where the managed Redis password lives, or None when auth is off."""
    auth = spec.cache.redis.auth_or_default
    if not auth.enabled:
        return None
    return auth.password_secret_ref or SecretKeyRef(name=meta.redis_auth_secret_name(owner))


def build_redis_configmap(spec: ServiceSpec, *, owner: Owner) -> dict[str, Any]:
    conf = render_redis_conf(spec.cache.redis, name=owner.name)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta.metadata(owner, f"{meta.redis_name(owner)}-config", COMPONENT),
        "data": {"redis.conf": conf},
    }


def build_redis_secret(spec: ServiceSpec, *, owner: Owner, password: str) -> dict[str, Any]:
    """The generated-password Secret; the caller keeps an existing password across reconciles."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta.metadata(owner, meta.redis_auth_secret_name(owner), COMPONENT),
        "type": "Opaque",
        "data": {"password": base64.b64encode(password.encode()).decode()},
    }


def build_redis_headless_service(spec: ServiceSpec, *, owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta.metadata(owner, f"{meta.redis_name(owner)}-headless", COMPONENT),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": meta.selector_labels(owner, COMPONENT),
            "ports": [{"name": "redis", "port": REDIS_PORT, "targetPort": "redis"}],
        },
    }


def build_redis_service(spec: ServiceSpec, *, owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta.metadata(owner, meta.redis_name(owner), COMPONENT),
        "spec": {
            "type": "ClusterIP",
            "selector": meta.selector_labels(owner, COMPONENT),
            "ports": [{"name": "redis", "port": REDIS_PORT, "targetPort": "redis"}],
        },
    }


def build_redis_pdb(spec: ServiceSpec, *, owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": meta.metadata(owner, meta.redis_name(owner), COMPONENT),
        "spec": {
            # One Redis pod: minAvailable 1 would block every node drain and node-group upgrade.
            # A cache may be away for a minute; the budget only keeps evictions one at a time.
            "maxUnavailable": 1,
            "selector": {"matchLabels": meta.selector_labels(owner, COMPONENT)},
        },
    }


def build_redis_networkpolicy(
    spec: ServiceSpec, *, owner: Owner, operator_namespace: str = meta.DEFAULT_OPERATOR_NAMESPACE
) -> dict[str, Any]:
    """Only this service's runtime pods and the operator's pods may open a connection to Redis.

    The operator's namespace comes from the spec, else from where the operator runs (passed in).
    """
    operator_namespace = spec.cache.redis.network_policy.operator_namespace or operator_namespace
    runtime_pods = {"podSelector": {"matchLabels": meta.selector_labels(owner, "runtime")}}
    operator_pods = operator_peer(operator_namespace)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta.metadata(owner, meta.redis_name(owner), COMPONENT),
        "spec": {
            "podSelector": {"matchLabels": meta.selector_labels(owner, COMPONENT)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [runtime_pods, operator_pods],
                    "ports": [{"protocol": "TCP", "port": REDIS_PORT}],
                }
            ],
        },
    }


def build_redis_statefulset(
    spec: ServiceSpec, *, owner: Owner, password_digest: str = ""
) -> dict[str, Any]:
    """The Redis pod; ``password_digest`` rolls it when a generated password was replaced."""
    redis = spec.cache.redis
    persistence = redis.persistence_or_default
    pod_labels = meta.labels(owner, COMPONENT)
    pod = _redis_pod_spec(spec, owner)
    template = {
        "metadata": {
            "labels": pod_labels,
            "annotations": {
                **meta.safe_to_evict_annotation(pod),
                # Only what needs a restart (maxmemory and its policy go live, CONFIG SET).
                meta.CONFIG_HASH_ANNOTATION: meta.config_hash(
                    restart_settings(redis), redis.image_or_default, password_digest
                ),
            },
        },
        "spec": pod,
    }
    stateful_spec: dict[str, Any] = {
        "serviceName": f"{meta.redis_name(owner)}-headless",
        "replicas": 1,
        "selector": {"matchLabels": meta.selector_labels(owner, COMPONENT)},
        "updateStrategy": copy.deepcopy(ROLLING_UPDATE),
        "persistentVolumeClaimRetentionPolicy": {
            "whenDeleted": "Retain" if persistence.retain_on_delete else "Delete",
            "whenScaled": "Retain",
        },
        "template": template,
    }
    if persistence.enabled:
        stateful_spec["volumeClaimTemplates"] = [_claim_template(spec, owner)]
    metadata = meta.metadata(owner, meta.redis_name(owner), COMPONENT)
    # What the pod template was when the operator applied it (read back by redis_restarts).
    metadata["annotations"] = {meta.TEMPLATE_HASH_ANNOTATION: meta.config_hash(template)}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": metadata,
            "spec": stateful_spec}  # fmt: skip


def _redis_pod_spec(spec: ServiceSpec, owner: Owner) -> dict[str, Any]:
    redis = spec.cache.redis
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": f"{meta.redis_name(owner)}-config"}},
        {"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE_LIMIT}},
    ]
    if not redis.persistence_or_default.enabled:
        volumes.append({"name": "data", "emptyDir": {}})
    return {
        "securityContext": pod_security(REDIS_USER_ID, user_ids=spec.user_ids or "fixed"),
        "automountServiceAccountToken": False,
        **meta.pull_secrets(spec),
        "terminationGracePeriodSeconds": 30,
        "containers": [_redis_container(spec, owner)],
        "volumes": volumes,
    }


def _redis_container(spec: ServiceSpec, owner: Owner) -> dict[str, Any]:
    redis = spec.cache.redis
    ref = password_ref(spec, owner)
    env: list[dict[str, Any]] = []
    start = START
    if ref is not None:
        secret = {"secretKeyRef": {"name": ref.name, "key": ref.key}}
        env = [
            {"name": PASSWORD_ENV, "valueFrom": secret},
            {"name": "REDISCLI_AUTH", "valueFrom": secret},  # redis-cli in the probes logs in
        ]
        start = password_on_stdin(start)
    return {
        "name": "redis",
        "image": redis.image_or_default,
        "command": ["sh", "-c", start],
        "env": env,
        "ports": [{"name": "redis", "containerPort": REDIS_PORT, "protocol": "TCP"}],
        "resources": redis.resources_or_default.as_dict(),
        "securityContext": container_security(),
        "readinessProbe": _probe("redis-cli ping | grep -q PONG", period_s=5),
        # LOADING means Redis is reading its persistence files: alive, just not ready.
        "livenessProbe": _probe("redis-cli ping | grep -qE 'PONG|LOADING'", period_s=10),
        "volumeMounts": [
            {"name": "config", "mountPath": CONF_DIR, "readOnly": True},
            {"name": "data", "mountPath": "/data"},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }


def password_on_stdin(start: str) -> str:
    """``start`` (an ``exec redis-server FILE``) with the password as a config line on Redis's
    standard input (``redis-server FILE -`` reads the file, then its input).

    Never ``--requirepass`` on the command line: a process's arguments are anyone's to read on
    the node (``/proc/PID/cmdline``, ``ps``), where its environment is its own user's. Here only
    the shell and its builtins (``printf``) see the password, ``od``, ``tr`` and ``sed`` read it
    on their input, and it reaches Redis as ``\\xHH`` escapes in a double-quoted string, so any
    byte (a quote, a space, a newline) reads back as it is in the Secret. The shell execs Redis
    (a here-document, not a pipe), so Redis stays the container's first process and gets its
    SIGTERM.
    """
    hexed = f"printf %s \"${PASSWORD_ENV}\" | od -An -tx1 -v | tr -d ' \\n' | sed 's/../\\\\x&/g'"
    return f'hex=$({hexed})\n{start} - <<EOF\nrequirepass "$hex"\nEOF\n'


def _probe(script: str, *, period_s: int) -> dict[str, Any]:
    return {
        "exec": {"command": ["sh", "-c", script]},
        "initialDelaySeconds": 5,
        "periodSeconds": period_s,
        "timeoutSeconds": 3,
        "failureThreshold": 3,
    }


def _claim_template(spec: ServiceSpec, owner: Owner) -> dict[str, Any]:
    persistence = spec.cache.redis.persistence_or_default
    claim_spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": str(persistence.size)}},
    }
    if persistence.storage_class_name is not None:
        claim_spec["storageClassName"] = persistence.storage_class_name
    return {
        "metadata": {"name": "data", "labels": meta.labels(owner, COMPONENT)},
        "spec": claim_spec,
    }


def with_password_on_command_line(statefulset: dict[str, Any]) -> dict[str, Any]:
    """``statefulset`` (as built here) with the pod template releases up to 0.3.0 rendered: the
    password on ``redis-server``'s command line (and no digest of the new template).

    Only for comparing with a live StatefulSet such a release made: the server's rendering of
    this object has the live pod template exactly when the password's delivery is all that
    differs (the skew tests check, example by example, that the template is the previous
    release's own output).
    """
    old = copy.deepcopy(statefulset)
    annotations = old["metadata"].get("annotations") or {}
    annotations.pop(meta.TEMPLATE_HASH_ANNOTATION, None)
    if not annotations:
        old["metadata"].pop("annotations", None)
    for container in old["spec"]["template"]["spec"]["containers"]:
        if container["name"] == "redis" and _has_password(container):
            container["command"] = ["sh", "-c", START + COMMAND_LINE_PASSWORD]
    return old


def password_on_command_line(container: Mapping[str, Any]) -> bool:
    """Whether the Redis ``container`` (of a pod or a template) is started with the password on
    its command line, as releases up to 0.3.0 started it."""
    command = container.get("command") or []
    return container.get("name") == "redis" and any(
        COMMAND_LINE_PASSWORD.strip() in str(part) for part in command
    )


def _has_password(container: Mapping[str, Any]) -> bool:
    return PASSWORD_ENV in {e.get("name") for e in container.get("env") or []}
