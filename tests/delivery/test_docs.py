"""The README and the docs site: the README stays a short front page whose links land on real
pages, every page is in the site's navigation, and the generated pages say what the code does.

The site itself is built by ``bash scripts/docs`` (``mkdocs build --strict``, in CI); most
checks here are the cheap part, without MkDocs. The last ones build the site once and read its
HTML and CSS as a browser would: a reader offline must get the whole site, diagrams included.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml

from cachefleet.bench import report
from cachefleet.runtime.config.flags import FLAGS
from delivery.support import REPO

DOCS = REPO / "docs"
README = (REPO / "README.md").read_text()
#: A Markdown link or image target that is not a URL or an anchor of the same page.
LINK = re.compile(r"\]\((?!https?://|#|mailto:)([^)\s]+)\)")


class _MkDocsLoader(yaml.SafeLoader):
    """mkdocs.yml as MkDocs reads it: ``!!python/name:`` tags name Python objects."""


_MkDocsLoader.add_multi_constructor(
    "tag:yaml.org,2002:python/name:", lambda loader, suffix, node: suffix
)


def nav_pages(entries: Any) -> Iterator[str]:
    """Every page the nav of mkdocs.yml names, in order."""
    if isinstance(entries, str):
        yield entries
    elif isinstance(entries, list):
        for entry in entries:
            yield from nav_pages(entry)
    elif isinstance(entries, dict):
        for value in entries.values():
            yield from nav_pages(value)


def links(markdown: str) -> list[str]:
    """Relative link targets outside code (a CEL rule in backticks may look like a link)."""
    prose = re.sub(r"^```.*?^```", "", markdown, flags=re.M | re.S)
    prose = re.sub(r"``.*?``|`[^`]*`", "", prose)
    return LINK.findall(prose)


def fenced_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```[a-z]*\n(.*?)^```", markdown, flags=re.M | re.S)


def test_the_readme_starts_with_the_two_commands() -> None:
    first, second = fenced_blocks(README)[:2]
    assert first.strip() == (
        "python3 -m venv .venv && .venv/bin/pip install -e '.[demo]' && .venv/bin/cachefleet demo"
    )
    assert second.strip() == "bash scripts/test"


def test_the_readme_is_a_front_page_not_the_manual() -> None:
    assert len(README.splitlines()) <= 200


def test_every_link_in_the_readme_lands_on_a_file() -> None:
    targets = links(README)
    assert any(target.startswith("docs/") for target in targets)
    missing = [t for t in targets if not (REPO / t.split("#")[0]).exists()]
    assert missing == []


def test_every_docs_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    config = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=_MkDocsLoader)
    listed = list(nav_pages(config["nav"]))
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(listed) == pages
    assert len(set(listed)) == len(listed)


def test_every_flag_is_on_the_flags_page() -> None:
    page = (DOCS / "reference" / "flags.md").read_text()
    for flag in FLAGS:
        assert f"`--{flag.name}`" in page
        assert f"`{flag.env_var}`" in page


def test_the_contract_metric_names_are_on_the_metrics_page() -> None:
    page = (DOCS / "reference" / "metrics.md").read_text()
    names = [
        "cachefleet_cache_hits_total", "cachefleet_cache_misses_total",
        "cachefleet_cache_bypass_total", "cachefleet_cache_coalesced_total",
        "cachefleet_cache_inserts_total", "cachefleet_cache_insert_dropped_total",
        "cachefleet_cache_errors_total", "cachefleet_cache_lookup_seconds",
        "cachefleet_inference_seconds", "cachefleet_request_seconds",
        "cachefleet_cache_local_bytes", "cachefleet_redis_circuit_open",
        "cachefleet_cache_row_hits_total", "cachefleet_cache_row_misses_total",
        "cachefleet_model_info", "cachefleet_inference_batch_size",
        "nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count",
        "nv_inference_exec_count", "nv_inference_pending_request_count",
        "nv_cache_num_hits_per_model", "nv_cache_num_misses_per_model",
        "nv_cache_hit_duration_per_model", "nv_cache_miss_duration_per_model",
    ]  # fmt: skip
    assert [name for name in names if f"| `{name}` |" not in page] == []


def test_the_crd_page_documents_every_field_and_rule() -> None:
    page = (DOCS / "reference" / "crd.md").read_text()
    for text in [
        "`spec.cache.redis.maxmemoryPolicy`", "`spec.runtime.restrictedApis`",
        "`status.conditions[].type`", "`status.served[].fingerprint`",
        "metadata.name must be at most 46 characters",
    ]:  # fmt: skip
        assert text in page


def test_the_benchmark_page_is_what_its_report_gives_now() -> None:
    """docs/benchmarks.md is remade by `cachefleet bench` from the report it names; the report
    stays in bench/results/ with the runs before it."""
    page = (DOCS / "benchmarks.md").read_text()
    source = report.page_source(page)
    assert source is not None
    assert source.startswith("bench/results/")
    assert page == report.docs_page((REPO / source).read_text(), source)


def test_results_history_stays_out_of_the_site() -> None:
    assert (REPO / "bench" / "results" / "history.md").is_file()
    assert not list(DOCS.rglob("history*.md"))


def test_links_between_pages_land_on_pages() -> None:
    """The cheap half of what `mkdocs build --strict` checks: relative links name real files."""
    missing = []
    for page in DOCS.rglob("*.md"):
        for target in links(page.read_text()):
            if not (page.parent / target.split("#")[0]).resolve().exists():
                missing.append(f"{page.relative_to(DOCS)} -> {target}")
    assert missing == []


def test_every_operator_variable_is_on_the_operator_settings_page() -> None:
    """The page is read from the settings' source; the variables found there by a plain search
    must all be on it (the chart's extraEnv comment names them too)."""
    source = (REPO / "operator" / "reconcile" / "settings.py").read_text()
    variables = set(re.findall(r'"(CACHEFLEET_OPERATOR_[A-Z_]+)"', source))
    page = (DOCS / "reference" / "operator-settings.md").read_text()
    assert variables
    assert sorted(v for v in variables if f"| `{v}` |" not in page) == []


def test_every_command_is_on_the_commands_page() -> None:
    from cachefleet.cli.main import COMMANDS

    page = (DOCS / "reference" / "commands.md").read_text()
    assert [name for name in COMMANDS if f"## cachefleet {name}\n" not in page] == []


def test_the_cache_settings_are_a_table_with_a_row_per_flag() -> None:
    """The cache guide lists its settings one row each, not as a paragraph of inline code."""
    page = (DOCS / "guide" / "cache.md").read_text()
    flags = [
        "local-cache-size", "cache-ttl", "cache-insert-queue", "cache-insert-queue-bytes",
        "redis-url", "redis-connect-timeout", "redis-socket-timeout", "redis-pool-size",
        "redis-mode", "redis-sentinel-master", "cache-namespace", "cache-secret",
        "cache-admission", "cache-fleet-coalescing", "cache-fleet-min-compute",
        "cache-fleet-max-wait",
    ]  # fmt: skip
    assert [flag for flag in flags if f"\n| `--{flag}` |" not in page] == []


def metric_sections(page: str) -> dict[str, list[str]]:
    """The metric names of each ``##`` section of the metrics page."""
    sections: dict[str, list[str]] = {}
    title = ""
    for line in page.splitlines():
        if line.startswith("## "):
            title = line[3:]
        elif match := re.match(r"\| `([a-z_]+)` \|", line):
            sections.setdefault(title, []).append(match.group(1))
    return sections


def test_the_metrics_page_is_grouped_by_what_the_metrics_are_about() -> None:
    sections = metric_sections((DOCS / "reference" / "metrics.md").read_text())
    assert "" not in sections  # no metric before the first section
    assert "cachefleet_cache_hits_total" in sections["Response cache"]
    assert "cachefleet_cache_row_hits_total" in sections["Row cache"]
    assert "cachefleet_redis_circuit_open" in sections["Redis"]
    assert "cachefleet_upstream_circuit_open" in sections["Upstream"]
    assert "cachefleet_inference_seconds" in sections["Requests, inference and models"]
    triton_inference = sections["Triton-compatible: inference"]
    assert all(name.startswith("nv_inference_") for name in triton_inference)
    assert all(name.startswith("nv_cache_") for name in sections["Triton-compatible: cache"])
    assert "Other" not in sections
    assert max(len(names) for names in sections.values()) <= 12


class _Assets(HTMLParser):
    """What a page makes a browser fetch: script sources, linked files, images and frames."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.styles: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        attribute = {"script": "src", "link": "href", "img": "src", "iframe": "src",
                     "source": "src", "video": "src", "audio": "src", "embed": "src",
                     "object": "data"}.get(tag)  # fmt: skip
        if attribute and found.get(attribute):
            self.urls.append(str(found[attribute]))
        if found.get("style"):
            self.styles.append(str(found["style"]))
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.styles.append(data)


#: A URL that leaves the site: a scheme with a host, or protocol-relative.
REMOTE = re.compile(r"^\s*(?:[a-z][a-z0-9+.-]*:)?//", re.I)
#: ``url(...)`` and ``@import "..."`` in CSS, with the address they name.
CSS_URL = re.compile(r"""url\(\s*['"]?([^'")]+)|@import\s+['"]([^'"]+)""", re.I)


def remote_in_css(css: str) -> list[str]:
    return [url for pair in CSS_URL.findall(css) for url in pair if url and REMOTE.match(url)]


@pytest.fixture(scope="module")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as ``scripts/docs`` builds it (strict), into a folder of this test's own."""
    site = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONSAFEPATH": "1", "NO_MKDOCS_2_WARNING": "1"}
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
         "--config-file", str(REPO / "mkdocs.yml"), "--site-dir", str(site)],
        check=True, cwd=REPO, env=env, timeout=600,
    )  # fmt: skip
    return site


def test_no_page_of_the_built_site_fetches_anything_from_another_host(built_site: Path) -> None:
    """Links to other sites are text; scripts, styles, fonts and images are all the site's own."""
    remote = []
    pages = sorted(built_site.rglob("*.html"))
    assert len(pages) > 20
    for page in pages:
        assets = _Assets()
        assets.feed(page.read_text(encoding="utf-8"))
        remote += [f"{page.relative_to(built_site)}: {u}" for u in assets.urls if REMOTE.match(u)]
        for style in assets.styles:
            remote += [f"{page.relative_to(built_site)}: {u}" for u in remote_in_css(style)]
    for sheet in sorted(built_site.rglob("*.css")):
        text = sheet.read_text(encoding="utf-8")
        remote += [f"{sheet.relative_to(built_site)}: {u}" for u in remote_in_css(text)]
    assert remote == []
    files = [*pages, *built_site.rglob("*.css")]
    everything = "".join(file.read_text(encoding="utf-8") for file in files)
    assert "fonts.googleapis.com" not in everything
    assert "fonts.gstatic.com" not in everything


def test_pages_with_diagrams_carry_the_diagram_script_themselves(built_site: Path) -> None:
    """Material draws ``mermaid`` fences with the mermaid already on the page and fetches one
    from a CDN when there is none, so a reader offline saw the diagrams' source text. Every page
    with a diagram must load mermaid from the site, from the file ``scripts/docs`` puts there."""
    script = "assets/javascripts/mermaid.min.js"
    assert f"MERMAID_JS=docs/{script}" in (REPO / "scripts" / "docs").read_text()
    with_diagrams = []
    for page in sorted(built_site.rglob("*.html")):
        html = page.read_text(encoding="utf-8")
        if 'class="mermaid"' not in html:
            continue
        with_diagrams.append(page.relative_to(built_site).as_posix())
        assets = _Assets()
        assets.feed(html)
        wanted = (built_site / script).resolve()
        local = [u for u in assets.urls if (page.parent / u).resolve() == wanted]
        assert local, f"{page.relative_to(built_site)} has diagrams but no local mermaid script"
    assert "architecture/index.html" in with_diagrams
