"""The one redaction of secrets in Redis URLs, for every log line, error body and metric.

A Redis URL may carry a password in two places redis-py reads: the user-info
(``redis://user:secret@host:6379/0``, ``unix://:secret@/run/redis.sock``) and the query
(``?password=secret``); Sentinel and Cluster seeds are URLs of the same forms. The settings
move a password found there into the password field (a secret that no dump includes) before
anything is logged or handed to worker processes, so the URL kept is safe to show. The same
patterns are redacted again from every log record and every client-facing error message, for
text that did not pass through the settings (a library's exception quoting a URL).
"""

from __future__ import annotations

import logging
import re
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

#: What a secret is replaced by.
MASK = "***"
#: ``scheme://user:secret@``: the user-info of any URL (redis, rediss, unix, or another), up to
#: its last ``@`` (a password may hold one unescaped, as redis-py reads it).
_USERINFO = re.compile(r"(?P<head>\b[a-z][a-z0-9+.-]*://[^\s/@:?#]*):(?P<secret>[^\s/?#]*)@")
#: ``password=secret`` in a query (or any ``key=value`` text): up to the next separator.
_QUERY = re.compile(r"(?P<head>[?&;\s]password=)(?P<secret>[^&#\s'\"]*)", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with every URL password replaced by :data:`MASK`."""
    if "password" not in text.lower() and "@" not in text:
        return text  # the common case: nothing that could be a secret, no regex work
    text = _USERINFO.sub(lambda m: f"{m['head']}:{MASK}@", text)
    return _QUERY.sub(lambda m: f"{m['head']}{MASK}", text)


def split_password(url: str) -> tuple[str, str | None]:
    """``(url without its password, the password or None)``; the user name stays.

    Both places redis-py reads a password from are emptied. The password returned is the one
    redis-py would use: the user-info's (percent-decoded) when it has one, else the query's
    first ``password``.
    """
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    kept = [(key, value) for key, value in query if key.lower() != "password"]
    from_query = [value for key, value in query if key.lower() == "password"]
    netloc = parts.netloc
    user_info, at, host = netloc.rpartition("@")
    from_user_info = None
    if at and ":" in user_info:
        user, _, from_user_info = user_info.partition(":")
        netloc = f"{user}@{host}" if user else host
    if from_user_info is None and not from_query:
        return url, None
    rest = urlunsplit(("", netloc, parts.path, urlencode(kept), parts.fragment))
    clean = f"{parts.scheme}:{rest}" if rest.startswith("//") else f"{parts.scheme}://{rest}"
    password = unquote(from_user_info) if from_user_info else None
    if password is None and from_query:
        password = from_query[0]
    return clean, password or None


class RedactingFilter(logging.Filter):
    """A logging filter that redacts URL passwords from every record's message (and its
    traceback text), so that no handler ever writes one."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True
