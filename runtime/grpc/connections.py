"""What a gRPC connection may hold of the server, as grpc core's channel arguments.

grpcio's synchronous server has no connection API of its own: every bound is one of gRPC
core's server channel arguments (``grpc/impl/channel_arg_names.h``), set once when the server is
built, and enforced by core before any code of ours runs:

- ``grpc.max_allowed_incoming_connections`` (``--grpc-max-connections``): past the cap, core
  closes a connection as it accepts it, handshaking or not, so idle HTTP/2 prefaces cannot take
  every descriptor of the process (HTTP's included). Its place is given back when it closes.
- ``grpc.server_handshake_timeout_ms`` (``--grpc-handshake-timeout``): a connection that does not
  finish TLS and send its HTTP/2 settings in time is closed (core's default is two minutes).
- ``grpc.max_connection_idle_ms`` (``--grpc-max-connection-idle``): a connection without a call
  for that long gets GOAWAY and is closed; clients reconnect on their next call.
- ``grpc.max_connection_age_ms`` and ``grpc.max_connection_age_grace_ms``
  (``--grpc-max-connection-age``, ``--grpc-max-connection-age-grace``): however busy, a
  connection gets GOAWAY at its age (core adds a jitter of about 10%), and is closed once the
  grace has passed, so no client keeps one for ever with a stream it never ends.
- Keepalive enforcement: client pings on a connection with calls must keep
  ``grpc.http2.min_recv_ping_interval_without_data_ms`` (``--grpc-min-ping-interval``) apart
  while no data flows, on one without calls two hours (``grpc.keepalive_permit_without_calls``
  off: idle connections are closed anyway); after ``grpc.http2.max_ping_strikes`` pings too soon
  the next closes the connection (GOAWAY ``too_many_pings``). These are core's defaults, set
  here so that they are written down and do not move with a grpcio release.
"""

from __future__ import annotations

from typing import Any

from cachefleet.runtime.config import LimitSettings

#: Pings too soon that are forgiven; the next one closes the connection (core's default).
MAX_PING_STRIKES = 2


def connection_options(limits: LimitSettings) -> list[tuple[str, Any]]:
    """The channel arguments that bound each gRPC connection, from ``limits``."""
    return [
        ("grpc.max_allowed_incoming_connections", limits.grpc_max_connections),
        ("grpc.server_handshake_timeout_ms", _ms(limits.grpc_handshake_timeout_s)),
        ("grpc.max_connection_idle_ms", _ms(limits.grpc_max_connection_idle_s)),
        ("grpc.max_connection_age_ms", _ms(limits.grpc_max_connection_age_s)),
        ("grpc.max_connection_age_grace_ms", _ms(limits.grpc_max_connection_age_grace_s)),
        ("grpc.keepalive_permit_without_calls", 0),
        (
            "grpc.http2.min_recv_ping_interval_without_data_ms",
            _ms(limits.grpc_min_ping_interval_s),
        ),
        ("grpc.http2.max_ping_strikes", MAX_PING_STRIKES),
    ]


def _ms(seconds: float) -> int:
    """Whole milliseconds, at least 1 (core reads 0 as "off" for some of these) and at most
    core's int range."""
    return max(1, min(int(seconds * 1000), 2**31 - 1))
