"""Run by path with any release's Python: does that release's runtime accept these invocations?

Reads JSON from stdin: a list of ``{"name", "argv", "env"}`` (``argv`` after ``cachefleet``), and
for each parses ``argv`` with that release's own command-line parser and, for ``serve``, loads its
settings with that release's own loader (flags, ``CACHEFLEET_*`` from ``env``, the ``--config``
file): exactly what ``cachefleet serve`` does before it starts. Prints JSON: name -> ``"ok"`` or
the error that release gives. It imports nothing but the release's installed ``cachefleet``, so
it runs unchanged against older releases (``tests/support/skew.py`` uses it both ways).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from typing import Any


def probe(case: dict[str, Any]) -> str:
    from cachefleet.cli.main import build_parser

    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            args = build_parser().parse_args(case["argv"])
    except SystemExit:
        return "refused its arguments: " + errors.getvalue().strip()
    if case["argv"][0] != "serve":
        return "ok"
    from cachefleet.runtime.config import SettingsError, load_settings

    try:
        load_settings(args, environ=case["env"])
    except SettingsError as error:
        return f"refused its settings: {error}"
    return "ok"


def main() -> None:
    cases = json.load(sys.stdin)
    print(json.dumps({case["name"]: probe(case) for case in cases}))


if __name__ == "__main__":
    main()
