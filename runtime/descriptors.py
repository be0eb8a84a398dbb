"""The process's file descriptors, budgeted: both transports' connection caps must fit.

Every open connection holds a descriptor, and the process has ``nofile`` of them, shared by
HTTP, gRPC, Redis, model files and logs. When the caps add up to more, the flood the caps are
there to stop runs the process out of descriptors first, and then every transport fails
(``accept`` gets ``EMFILE``): 1,100 idle gRPC connections broke HTTP inference this way. So at
start, as servers do, the soft limit is raised to the hard one (which needs no privilege), and
the caps are checked against it: ``--max-connections`` plus ``--grpc-max-connections`` (when
gRPC is on) plus :data:`RESERVED` and the Redis pool must fit. When they do not, both caps are
lowered in proportion until they do, with one warning that names the flags and the limit; a
limit too small for even that is a settings error.

Each worker process (``--workers N``) inherits the raised limit and holds its own connections,
so the budget is per process, as the caps are.
"""

from __future__ import annotations

import logging
import resource
from dataclasses import dataclass

from cachefleet.runtime.config import RuntimeSettings, SettingsError

log = logging.getLogger(__name__)
#: Descriptors kept for everything but connections: the listening sockets, the event loops'
#: and gRPC core's own, model files while they load, logs, pipes.
RESERVED = 64
#: The soft limit asked for when the hard one is unlimited (Linux refuses more than its
#: ``nr_open``, whose default is this).
UNLIMITED_SOFT = 2**20


@dataclass(frozen=True)
class Budget:
    """What the caps need and what the process has."""

    http: int
    grpc: int
    reserved: int
    limit: int

    @property
    def needed(self) -> int:
        return self.http + self.grpc + self.reserved


def raise_soft_limit() -> int:
    """Raise the soft ``nofile`` limit to the hard one if allowed; the soft limit after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = UNLIMITED_SOFT if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError) as error:
            log.warning("cannot raise the open-file limit (nofile) from %d: %s", soft, error)
            return soft
        return wanted
    return UNLIMITED_SOFT if soft == resource.RLIM_INFINITY else soft


def fit_connection_caps(settings: RuntimeSettings, limit: int | None = None) -> RuntimeSettings:
    """``settings`` with connection caps that fit ``limit`` descriptors (by default the soft
    limit, raised first: :func:`raise_soft_limit`). Raises SettingsError when not even one
    connection of each transport fits."""
    limit = raise_soft_limit() if limit is None else limit
    limits = settings.limits
    grpc_on = settings.server.grpc_port != 0
    budget = Budget(
        http=limits.max_connections,
        grpc=limits.grpc_max_connections if grpc_on else 0,
        reserved=RESERVED + (settings.redis.pool_size if settings.redis.url else 0),
        limit=limit,
    )
    if budget.needed <= limit:
        return settings
    room = limit - budget.reserved
    transports = 2 if grpc_on else 1
    if room < transports:
        raise SettingsError(
            f"the open-file limit (nofile) {limit} leaves no descriptors for connections: "
            f"{budget.reserved} are kept for the process and its Redis pool; raise it "
            "(ulimit -n, or the container's nofile)"
        )
    http = max(1, room * budget.http // (budget.http + budget.grpc))
    grpc = room - http if grpc_on else limits.grpc_max_connections
    log.warning(
        "the open-file limit (nofile) %d is below what the connection caps need (%d: "
        "--max-connections %d%s, and %d kept for the process): serving at most %d HTTP%s "
        "connections; raise the limit or lower the caps",
        limit,
        budget.needed,
        budget.http,
        f", --grpc-max-connections {budget.grpc}" if grpc_on else "",
        budget.reserved,
        http,
        f" and {grpc} gRPC" if grpc_on else "",
    )
    fitted = limits.model_copy(update={"max_connections": http, "grpc_max_connections": grpc})
    return settings.model_copy(update={"limits": fitted})
