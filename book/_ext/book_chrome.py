"""Small Sphinx fixes for the rendered book (loaded from _config.yml's local_extensions).

* Every inline script is emitted once: sphinx-thebe adds its configuration script
  (``const THEBE_JS_URL = ...``) in a way that Sphinx 7 lists twice, and the second
  copy is a JavaScript error on every page.
* Exercises are numbered per chapter, "Exercise 4.2" in chapter 4, instead of 1 to N
  across the whole book (sphinx-exercise numbers them like figures, and the book's
  table of contents is not numbered).
"""

from __future__ import annotations

import re
from typing import Any

CHAPTER = re.compile(r"(?:^|/)(\d+)_[^/]*$")  # book/04_encoder_block -> 4


def _unique_scripts(app, pagename: str, templatename: str, context: dict, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for js in scripts:
        key = (js.filename or "", js.priority, tuple(sorted(js.attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(js)
    scripts[:] = unique


def _number_exercises_per_chapter(app, env) -> list[str]:
    renumbered = []
    for docname, numbers in env.toc_fignumbers.items():
        chapter = CHAPTER.search(docname)
        exercises = numbers.get("exercise")
        if chapter and exercises:
            in_order = sorted(exercises, key=exercises.get)
            for index, node_id in enumerate(in_order, start=1):
                exercises[node_id] = (int(chapter.group(1)), index)
            renumbered.append(docname)
    return renumbered  # written again, with these numbers


def setup(app) -> dict[str, Any]:
    app.connect("html-page-context", _unique_scripts)
    # After Sphinx has numbered figures (and exercises) across the book.
    app.connect("env-get-updated", _number_exercises_per_chapter, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
