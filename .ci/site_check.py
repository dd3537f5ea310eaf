"""Checks on the built documentation site, after ``mkdocs build --strict``:

- every code block (``<pre>``) was highlighted by Pygments at build time (it sits in a
  ``codehilite`` block, whose stylesheet ``css/pygments.css`` every page links), and Python
  blocks carry token classes: nothing is left for a script to colour in the browser;
- no page loads a script, stylesheet, font or image from the network (``http(s)://`` or
  ``//host`` in a ``src`` or a ``<link href>``, ``url(http...)`` or ``@import`` in CSS), so the
  site reads the same offline;
- the ``jit`` page documents the function ``jitgraph.jit`` first (not the module
  ``jitgraph/jit.py``), titled ``jitgraph.jit``, with its signature;
- every page has the search box, and the search index exists;
- every public function and class has its page, rendering it.

Usage: python .ci/site_check.py [SITE_DIR]   (default: site). Exit status 1 on a failure.
"""
from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}
REMOTE = re.compile(r"^(?:https?:)?//", re.I)


class Page(HTMLParser):
    """What the checks need from one page: its code blocks and what they sit in, and every
    resource it loads."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, set]] = []
        self.pres: list[dict] = []          # per <pre>: highlighted?, token classes seen
        self.loads: list[str] = []          # "tag attr=url" of every resource loaded
        self.headings: list[tuple[str, str, set]] = []  # (tag, id, classes) of doc headings
        self.objects: list[set] = []        # classes of each mkdocstrings object, in order
        self.signatures: list[str] = []     # the text of each signature block
        self.ids: set = set()
        self._pre: dict | None = None
        self._sig: list[str] | None = None
        self._sig_depth = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = set((a.get("class") or "").split())
        if a.get("id"):
            self.ids.add(a["id"])
        for attr in ("src", "srcset", "data"):
            if a.get(attr) and REMOTE.match(a[attr].strip()):
                self.loads.append(f"<{tag} {attr}={a[attr]}>")
        if tag == "link" and a.get("href") and REMOTE.match(a["href"].strip()):
            rel = (a.get("rel") or "").lower()
            if rel not in ("canonical", "alternate"):
                self.loads.append(f"<link rel={rel} href={a['href']}>")
        if tag == "pre":
            inside = any("codehilite" in c for _, c in self.stack) or "codehilite" in classes
            self._pre = {"highlighted": inside, "tokens": set()}
            self.pres.append(self._pre)
        elif tag == "span" and self._pre is not None:
            self._pre["tokens"] |= classes
        if tag == "div" and "doc-object" in classes:
            self.objects.append(classes)
        if tag in ("h1", "h2", "h3") and "doc-heading" in classes:
            self.headings.append((tag, a.get("id", ""), classes))
        if tag == "div" and "doc-signature" in classes:
            self._sig, self._sig_depth = [], len(self.stack)
        if tag not in VOID:
            self.stack.append((tag, classes))

    def handle_endtag(self, tag):
        if tag == "pre":
            self._pre = None
        if tag in VOID:
            return
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                break
        if self._sig is not None and len(self.stack) <= self._sig_depth:
            self.signatures.append("".join(self._sig).strip())
            self._sig = None

    def handle_data(self, data):
        if self._sig is not None:
            self._sig.append(data)


def parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    return page


def check(site: Path) -> list[str]:
    errors: list[str] = []
    pages = sorted(site.rglob("*.html"))
    if not pages:
        return [f"no HTML pages under {site}: build the site first (mkdocs build --strict)"]
    if not (site / "css" / "pygments.css").is_file():
        errors.append("css/pygments.css is missing (docs/hooks/highlight_css.py writes it)")
    if not (site / "search" / "search_index.json").is_file():
        errors.append("search/search_index.json is missing (the search plugin)")
    n_pre = 0
    for path in pages:
        rel = path.relative_to(site)
        text = path.read_text(encoding="utf-8")
        page = parse(path)
        for load in page.loads:
            errors.append(f"{rel}: loads from the network: {load}")
        if rel.name != "404.html" and str(rel) != "search.html":
            if "mkdocs_search_modal" not in page.ids or 'id="mkdocs-search-query"' not in text:
                errors.append(f"{rel}: no search box")
            if "pygments.css" not in text:
                errors.append(f"{rel}: does not link css/pygments.css")
        for i, pre in enumerate(page.pres):
            n_pre += 1
            if not pre["highlighted"]:
                errors.append(f"{rel}: code block {i + 1} is not Pygments-highlighted")
        if "hljs" in text or "highlight.min.js" in text:
            errors.append(f"{rel}: uses highlight.js (highlighting must happen at build time)")
    if n_pre == 0:
        errors.append("no code blocks found at all")
    for css in sorted(site.rglob("*.css")):
        for m in re.finditer(r"(@import[^;]*|url\(\s*['\"]?(?:https?:)?//[^)]*\))",
                             css.read_text(encoding="utf-8", errors="replace"), re.I):
            errors.append(f"{css.relative_to(site)}: loads from the network: {m.group(0)[:80]}")

    # highlighted for real: the home page's and a guide's Python blocks carry token classes
    for rel in ("index.html", "guides/transforms/index.html"):
        path = site / rel
        if not path.is_file():
            errors.append(f"{rel} is missing")
            continue
        if not any({"k", "kn", "n", "nf"} & pre["tokens"] for pre in parse(path).pres):
            errors.append(f"{rel}: no code block has Pygments token classes")

    # every public function and class has a page rendering it (docs/hooks/public_api.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "docs" / "hooks"))
    try:
        import public_api
    finally:
        sys.path.pop(0)
    for modname, name in public_api.all_object_pages():
        rel = public_api.object_page(modname, name)[:-len(".md")] + "/index.html"
        path = site / rel
        if not path.is_file():
            errors.append(f"{rel} is missing (the page of {modname}.{name})")
        elif not re.search(r'<h1 id="[^"]+" class="doc doc-heading">',
                           path.read_text(encoding="utf-8")):
            errors.append(f"{rel}: does not render {modname}.{name}")

    # the jit page: the function first
    jit = site / "api" / "jitgraph.jit" / "index.html"
    if not jit.is_file():
        errors.append("api/jitgraph.jit/index.html is missing")
    else:
        page = parse(jit)
        text = jit.read_text(encoding="utf-8")
        if not page.objects or "doc-function" not in page.objects[0]:
            errors.append(f"the jit page's first object is not a function: {page.objects[:1]}")
        if not page.headings or page.headings[0][:2] != ("h1", "jitgraph.jit.jit"):
            errors.append(f"the jit page does not open with the function's heading: "
                          f"{page.headings[:1]}")
        m = re.search(r'<h1 id="jitgraph\.jit\.jit"[^>]*>\s*(.*?)\s*<', text, re.S)
        if not m or m.group(1).strip() != "jitgraph.jit":
            errors.append(f"the jit page's title is not 'jitgraph.jit': {m and m.group(1)!r}")
        if not page.signatures or not page.signatures[0].startswith("jit("):
            errors.append(f"the jit page's first signature is not jit's: {page.signatures[:1]}")
        if "doc-module" in text.split('id="jitgraph.jit.jit"')[0]:
            errors.append("the jit page renders a module before the function")
    return errors


def main(argv: list[str]) -> int:
    site = Path(argv[1] if len(argv) > 1 else "site")
    errors = check(site)
    for e in errors:
        print(f"site_check: {e}", file=sys.stderr)
    if not errors:
        print(f"site_check: {site}: code highlighted at build time, nothing loaded from the "
              "network, the jit page documents the function first, search on every page")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
