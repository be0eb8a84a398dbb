"""The one failure of a fetch: the URI and why, in a line a user reads in ``kubectl describe``."""

from __future__ import annotations


class FetchError(Exception):
    """Fetching ``uri`` failed for ``reason`` (never a credential: stores' messages name none)."""

    def __init__(self, uri: str, reason: str) -> None:
        super().__init__(f"cannot fetch {uri}: {reason}")
        self.uri = uri
        self.reason = reason
