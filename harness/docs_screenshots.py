"""Full-page screenshots of the built documentation site, and the checks a reader would make.

``python -m harness.docs_screenshots --site site --out DIR`` (``scripts/screenshot-docs`` builds
the site first and calls it) serves ``site/`` on a loopback port, opens the home page, the
CachedInferenceService reference and the architecture page in headless Chromium, and writes one
full-page PNG each into DIR. Chromium's ``--screenshot`` flag only captures the window, so the
pages are driven over the DevTools protocol (a WebSocket on a loopback port) instead.

What a reader would notice is checked too, and the run fails (status 1, every problem listed)
when a page:

- fetches anything from outside the loopback server: the site must read offline (no CDN
  mermaid, no web fonts). Name resolution is also mapped away from everything but loopback, so
  a stray fetch fails instead of leaving the machine;
- shows a diagram as its source text: Material replaces each ``<pre class="mermaid">`` by a
  drawn diagram (in a closed shadow root), so one left on the page was not drawn;
- breaks a name inside a table cell: inline code in a table that wraps onto a second line
  between two letters or digits (a break at a space, a hyphen, a slash or a bracket is fine);
- shrinks a diagram to fit the column so far that its text is smaller than the page's small
  print: mermaid scales a drawing wider than the column down to its width, so a wide
  left-to-right chart came out with 8-pixel labels (draw such a chart top-down instead). The
  drawing sits in a closed shadow root, which the DOM domain of the protocol can still see;
- clips a code block: a ``<pre>`` whose lines are wider than the block and that cannot scroll.

The PNGs are for a person to look at; the checks are what a script can tell.
"""

from __future__ import annotations

import argparse
import base64
import functools
import http.server
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

# The pages a newcomer opens first, and the reference page with the longest names.
PAGES = {
    "home": "index.html",
    "reference-crd": "reference/crd/index.html",
    "architecture": "architecture/index.html",
}
WIDTH = 1280
WAIT_S = 30.0
# Mermaid draws labels at 16 px; below this scale they are smaller than 12 px on the page.
SMALLEST_DIAGRAM_SCALE = 0.75

# Run in the page once it has loaded; returns what the checks need as JSON-able values.
PROBE = """(() => {
  const word = /\\w/;
  const broken = [];
  for (const code of document.querySelectorAll('.md-typeset table code')) {
    const rects = code.getClientRects();
    if (rects.length < 2) continue;
    // Where the line broke: the text of the first line box, found by walking the characters.
    const text = code.textContent;
    const range = document.createRange();
    const node = code.firstChild;
    if (!node || node.nodeType !== Node.TEXT_NODE) { broken.push(text); continue; }
    const top = rects[0].top;
    let cut = text.length;
    for (let i = 1; i < text.length; i++) {
      range.setStart(node, i); range.setEnd(node, i + 1);
      if (range.getBoundingClientRect().top > top + 1) { cut = i; break; }
    }
    if (word.test(text[cut - 1] || '') && word.test(text[cut] || '')) broken.push(text);
  }
  const clipped = [];
  for (const pre of document.querySelectorAll('.md-typeset pre')) {
    const code = pre.querySelector('code');
    if (!code || pre.classList.contains('mermaid')) continue;
    const style = getComputedStyle(code);
    const scrolls = ['auto', 'scroll'].includes(style.overflowX);
    const wider = code.scrollWidth > code.clientWidth + 1;
    if (wider && !scrolls) clipped.push(code.textContent.slice(0, 60));
  }
  return {
    undrawn: document.querySelectorAll('pre.mermaid').length,
    drawn: [...document.querySelectorAll('div.mermaid')].filter(d => d.offsetHeight > 40).length,
    broken: broken,
    clipped: clipped,
    height: Math.ceil(document.documentElement.scrollHeight),
  };
})()"""


@dataclass
class DevTools:
    """One page of Chromium over the DevTools protocol: commands out, events recorded."""

    socket: ClientConnection
    requests: list[str] = field(default_factory=list)
    _next_id: int = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and return its result, recording the events that come before it."""
        self._next_id += 1
        self.socket.send(json.dumps({"id": self._next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=WAIT_S))
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message["result"]
                return result
            self._record(message)

    def drain(self, seconds: float) -> None:
        """Record the events that arrive within ``seconds``."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                self._record(json.loads(self.socket.recv(timeout=left)))
            except TimeoutError:
                return

    def _record(self, message: dict[str, Any]) -> None:
        if message.get("method") == "Network.requestWillBeSent":
            self.requests.append(message["params"]["request"]["url"])


@contextmanager
def serving(site: Path) -> Iterator[str]:
    """Serve ``site`` on a loopback port for as long as the block runs; yields its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def chromium(binary: str) -> Iterator[DevTools]:
    """Start headless Chromium with loopback-only name resolution; yield its first page."""
    with tempfile.TemporaryDirectory(
        prefix="cachefleet-chromium-", ignore_cleanup_errors=True
    ) as profile:
        process = subprocess.Popen(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                f"--window-size={WIDTH},900",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            port = _devtools_port(Path(profile) / "DevToolsActivePort", process)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list") as answer:
                targets = json.load(answer)
            page = next(t for t in targets if t["type"] == "page")
            with connect(page["webSocketDebuggerUrl"], max_size=None) as socket:
                yield DevTools(socket)
        finally:
            process.terminate()
            process.wait(timeout=WAIT_S)


def _devtools_port(path: Path, process: subprocess.Popen[bytes]) -> int:
    """The port Chromium wrote into its profile once DevTools listens (bounded wait)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"chromium exited with status {process.returncode}")
        if path.is_file() and (lines := path.read_text().split()):
            return int(lines[0])
        time.sleep(0.1)
    raise RuntimeError("chromium did not open its DevTools port")


def shoot(tools: DevTools, url: str, out: Path) -> list[str]:
    """Open ``url``, wait for its diagrams, write a full-page PNG to ``out``; return problems."""
    tools.requests.clear()
    _viewport(tools, height=900)
    tools.call("Page.navigate", url=url)
    probe = _settled(tools)
    _viewport(tools, height=probe["height"])
    tools.drain(1.0)  # let the taller viewport lay out (and lazy assets load) before the capture
    shot = tools.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
    out.write_bytes(base64.b64decode(shot["data"]))
    base = url[: url.index("/", len("http://")) + 1]
    problems = [
        f"fetched from outside the site: {u}" for u in tools.requests if not _local(u, base)
    ]
    if probe["undrawn"]:
        problems.append(f"{probe['undrawn']} diagram(s) shown as source text, not drawn")
    problems += [
        f"a diagram is drawn at {scale:.0%} of its size, its labels too small to read"
        for scale in diagram_scales(tools)
        if scale < SMALLEST_DIAGRAM_SCALE
    ]
    problems += [f"a table breaks the name {name!r} mid-word" for name in probe["broken"]]
    problems += [f"a code block is clipped: {text!r}" for text in probe["clipped"]]
    return problems


def _viewport(tools: DevTools, *, height: int) -> None:
    tools.call(
        "Emulation.setDeviceMetricsOverride",
        width=WIDTH,
        height=height,
        deviceScaleFactor=1,
        mobile=False,
    )


def _settled(tools: DevTools) -> dict[str, Any]:
    """Probe the page until it has loaded and no diagram is left to draw (bounded wait)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        tools.drain(0.5)
        ready = tools.call("Runtime.evaluate", expression="document.readyState", returnByValue=True)
        probe: dict[str, Any] = tools.call(
            "Runtime.evaluate", expression=PROBE, returnByValue=True
        )["result"]["value"]
        if ready["result"]["value"] == "complete" and probe["undrawn"] == 0:
            return probe
        if time.monotonic() > deadline:
            return probe


def diagram_scales(tools: DevTools) -> list[float]:
    """For each drawn diagram, its width on the page over the width mermaid drew it at."""
    document = tools.call("DOM.getDocument", depth=-1, pierce=True)["root"]
    scales = []
    for node in _svgs(document):
        attributes = dict(zip(node["attributes"][::2], node["attributes"][1::2], strict=True))
        if (
            "flowchart" not in attributes.get("aria-roledescription", "")
            or "viewBox" not in attributes
        ):
            continue
        drawn = float(attributes["viewBox"].split()[2])
        shown = tools.call("DOM.getBoxModel", nodeId=node["nodeId"])["model"]["width"]
        scales.append(shown / drawn)
    return scales


def _svgs(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every ``<svg>`` under ``node``, shadow roots included."""
    if node.get("nodeName", "").lower() == "svg":
        yield node
    for child in [*node.get("children", []), *node.get("shadowRoots", [])]:
        yield from _svgs(child)


def _local(url: str, base: str) -> bool:
    return url.startswith((base, "data:", "blob:", "about:"))


def main(argv: list[str] | None = None) -> int:
    """Screenshot the pages into ``--out``; print each PNG and every problem found."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--site", type=Path, default=Path("site"), help="the built site (mkdocs build)"
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for the PNGs (created)")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    failed = False
    with serving(args.site) as base, chromium(args.chromium) as tools:
        tools.call("Network.enable")
        tools.call("Page.enable")
        for name, page in PAGES.items():
            png = args.out / f"{name}.png"
            problems = shoot(tools, base + page, png)
            print(f"{png}: {'ok' if not problems else 'PROBLEMS'}")
            for problem in problems:
                print(f"  {problem}")
            failed = failed or bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
