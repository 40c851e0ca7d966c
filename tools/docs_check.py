"""The built site checked in a real browser (``make docs-check``; issue 49, item 7).

Opens every page of ``site/`` from the file system (``file://``, as the README says to open
it) in headless Chromium at 1280 px and checks that:

- the page renders (Material's JavaScript ran: the header and the article are there);
- no page scrolls sideways (``document.scrollingElement.scrollWidth`` within the window) and no
  table runs out of the article (a wide table scrolls inside its own box);
- search works from ``file://``: ``index.html?q=replace_rnns`` lists a result on the
  ``cudnn_rnn.nn`` reference page;
- every internal link (``href`` to a file of the site, and its ``#anchor``) resolves.

Chromium is driven with ``--dump-dom`` only (no WebDriver): a probe script injected into a
copy of each page writes what it measured into the DOM, which the dump returns. Needs Debian's
``chromium`` (``apt-get install -y chromium``) or ``CHROMIUM=/path/to/chrome``; not part of
``make test``.

    python tools/docs_check.py [SITE_DIR]
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 1280
QUERY = "replace_rnns"

#: Injected before ``</body>``: measures the page once Material has set it up (and, with a
#: ``q`` parameter, run the search), and writes the result into ``<pre id="docs-check">``.
PROBE = """<script>
(function () {
  function measure() {
    var doc = document.scrollingElement || document.documentElement;
    var article = document.querySelector("article.md-content__inner");
    var limit = article ? article.getBoundingClientRect().right + 1 : window.innerWidth;
    var tables = Array.prototype.slice.call(document.querySelectorAll("article table"));
    var wide = tables.filter(function (t) {
      var box = t.closest(".md-typeset__scrollwrap") || t;
      return box.getBoundingClientRect().right > limit;
    }).map(function (t) { return (t.textContent || "").trim().slice(0, 60); });
    var results = Array.prototype.slice.call(
      document.querySelectorAll(".md-search-result__item a, .md-search-result__link")
    ).map(function (a) { return a.getAttribute("href"); });
    var out = document.createElement("pre");
    out.id = "docs-check";
    out.textContent = JSON.stringify({
      scrollWidth: doc.scrollWidth, innerWidth: window.innerWidth,
      rendered: !!(document.querySelector(".md-header") && article &&
                   document.documentElement.classList.contains("js")),
      wideTables: wide, results: results
    });
    document.body.appendChild(out);
  }
  window.addEventListener("load", function () { setTimeout(measure, 3000); });
})();
</script>
"""


def chromium() -> str:
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return str(shutil.which(name))
    sys.exit("docs-check: no Chromium found: apt-get install -y chromium (or set CHROMIUM)")


def dump(browser: str, url: str) -> str:
    run = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
         f"--window-size={WIDTH},900", "--virtual-time-budget=15000", "--dump-dom", url],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return run.stdout


def probe(browser: str, page: Path, query: str = "") -> dict[str, object]:
    url = page.as_uri() + (f"?q={query}" if query else "")
    match = re.search(r'<pre id="docs-check">(.*?)</pre>', dump(browser, url), flags=re.S)
    if not match:
        return {"rendered": False, "error": "the probe did not run"}
    text = match.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
    return dict(json.loads(text.replace("&amp;", "&")))


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(str(a["id"]))
        if tag == "a" and a.get("href"):
            self.hrefs.append(str(a["href"]))


def broken_links(site: Path) -> list[str]:
    parsed: dict[Path, _Links] = {}

    def links(page: Path) -> _Links:
        if page not in parsed:
            parser = _Links()
            parser.feed(page.read_text(errors="replace"))
            parsed[page] = parser
        return parsed[page]

    broken = []
    for page in sorted(site.rglob("*.html")):
        if page.name == "404.html":  # (its links are absolute: a server's error page)
            continue
        for href in links(page).hrefs:
            parts = urlsplit(href)
            if parts.scheme or parts.netloc or href.startswith("mailto:"):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(site)}: {href} (no such file)")
            elif parts.fragment and target.suffix == ".html":
                if unquote(parts.fragment) not in links(target).ids:
                    broken.append(f"{page.relative_to(site)}: {href} (no such anchor)")
    return broken


def main(argv: list[str]) -> int:
    site = Path(argv[0]) if argv else ROOT / "site"
    if not (site / "index.html").is_file():
        sys.exit(f"docs-check: {site}/index.html is missing: run make docs first")
    browser = chromium()
    problems = broken_links(site)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "site"
        shutil.copytree(site, copy)
        pages = sorted(copy.rglob("*.html"))
        for page in pages:
            page.write_text(page.read_text().replace("</body>", PROBE + "</body>", 1))
        for page in pages:
            name = page.relative_to(copy).as_posix()
            if name == "404.html":
                continue
            got = probe(browser, page)
            if not got.get("rendered"):
                problems.append(f"{name}: did not render ({got.get('error', 'no header')})")
                continue
            if int(str(got["scrollWidth"])) > int(str(got["innerWidth"])):
                problems.append(
                    f"{name}: scrolls sideways at {WIDTH} px ({got['scrollWidth']} px wide)"
                )
            for table in list(got.get("wideTables") or []):  # type: ignore[call-overload]
                problems.append(f"{name}: a table runs off the article: {table!r}")
            print(f"ok  {name}")
        found = probe(browser, copy / "index.html", QUERY)
        hits = [str(h) for h in list(found.get("results") or [])]  # type: ignore[call-overload]
        if not any("reference/nn.html" in h for h in hits):
            problems.append(
                f"search from file:// for {QUERY!r} found no cudnn_rnn.nn entry (results: {hits})"
            )
        else:
            print(f"ok  search from file:// for {QUERY!r}: {len(hits)} results")
    for problem in problems:
        print(f"FAIL {problem}")
    print(f"docs-check: {len(pages)} pages, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
