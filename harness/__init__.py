"""The repository's own harness: runs that are not user commands, kept out of the wheel.

- :mod:`harness.operator_scale`: the operator at scale against the Kubernetes emulator.
- :mod:`harness.kube_emulator`: kmock with a real API server's bookkeeping; the operator tests
  run against it too (``tests/support/kube``).
- :mod:`harness.cache_micro`: the response cache's costs at its API (keys, hits, misses).
- :mod:`harness.http_hit_micro`: what an HTTP memo hit costs inside the server (its ASGI app
  driven in-process) beside a bare ASGI app sending the same bytes.
- :mod:`harness.fleet_burst`: bursts of identical requests on a fleet of servers, with fleet
  coalescing on and off (model executions per burst, time to the last answer).
- :mod:`harness.chaos`: the reliability run, Redis faults under load with every answer checked
  (``tests/reliability`` runs it short; ``answers``, what a correct answer is, serves the
  end-to-end tests too).
- :mod:`harness.docs_screenshots`: the built docs site in headless Chromium, screenshots and the
  checks a reader would make (``scripts/screenshot-docs``).

Run a module from the repository root with ``bash scripts/harness <module> [options]`` (it puts
the repository on the path, which ``PYTHONSAFEPATH=1`` otherwise keeps off), or with
``python -m harness.<module>`` there without ``PYTHONSAFEPATH``. It needs the development install
(``bash scripts/setup-dev``: kmock and the rest of ``.[dev]``). The harness may import the
package; the package never imports the harness (import-linter checks).
"""
