"""MkDocs hook: the site's search works offline, from `file://`.

MkDocs' own search reads `search/search_index.json` with an XMLHttpRequest inside a Web Worker; a browser refuses
both to a page opened from disk (an error on every page, and no results). After the search plugin has written its
index (`on_post_build`), this hook writes the same index as a script, `search/search_index.js`, and replaces
`search/main.js` with `SEARCH_JS`: on search.html only, it loads lunr and the index with `<script>` tags (which
`file://` allows) and searches on the page itself. The other pages' search box submits to search.html.
"""

from __future__ import annotations

import json
from pathlib import Path

SEARCH_JS = r"""// sinkscope's offline search (docs/hooks/offline_search.py): lunr and the index load as scripts, the search runs
// on the page. MkDocs' own search needs a Web Worker and an XMLHttpRequest, both refused from file://.
(function () {
  var input = document.getElementById("mkdocs-search-query");
  var results = document.getElementById("mkdocs-search-results");
  if (!input || !results) { return; }  // not search.html: the sidebar's box submits to it
  var root = base_url.replace(/\/$/, "") + "/";
  var index = null, documents = {};

  function load(src, next) {
    var script = document.createElement("script");
    script.src = root + src;
    script.onload = next;
    script.onerror = function () { results.textContent = "The search index (" + src + ") could not be loaded."; };
    document.head.appendChild(script);
  }

  function escapeHtml(value) {
    return value.replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function matches(query) {
    try {
      return index.search(query);
    } catch (error) {  // lunr's query syntax (field:, ~, ^): read the words as plain words instead
      return index.search(query.replace(/[:~^*+\-]/g, " "));
    }
  }

  function show() {
    var query = input.value.trim();
    results.innerHTML = "";
    if (query.length < 2) { return; }
    var found = matches(query);
    if (!found.length) {
      results.textContent = results.getAttribute("data-no-results-text") || "No results found";
      return;
    }
    found.forEach(function (match) {
      var doc = documents[match.ref];
      results.insertAdjacentHTML("beforeend", '<article><h3><a href="' + escapeHtml(root + doc.location) + '">' +
        escapeHtml(doc.title) + "</a></h3><p>" + escapeHtml(doc.text.substring(0, 200)) + "</p></article>");
    });
  }

  load("search/lunr.js", function () {
    load("search/search_index.js", function () {
      var data = window.sinkscopeSearchIndex;
      if (data.config && data.config.separator) { lunr.tokenizer.separator = new RegExp(data.config.separator); }
      index = lunr(function () {
        this.field("title");
        this.field("text");
        this.ref("location");
        data.docs.forEach(function (doc) { this.add(doc); documents[doc.location] = doc; }, this);
      });
      var term = new URLSearchParams(window.location.search).get("q");
      if (term) { input.value = term; }
      input.addEventListener("keyup", show);
      show();
    });
  });
})();
"""


def on_post_build(config, **_) -> None:
    search = Path(config["site_dir"]) / "search"
    index = search / "search_index.json"
    if not index.is_file():  # the search plugin is off: nothing to serve
        return
    data = json.loads(index.read_text(encoding="utf-8"))
    (search / "search_index.js").write_text(f"window.sinkscopeSearchIndex = {json.dumps(data)};\n", encoding="utf-8")
    (search / "main.js").write_text(SEARCH_JS, encoding="utf-8")
    (search / "worker.js").unlink(missing_ok=True)  # MkDocs' worker: not used any more
