"""``glue``: store a value in a cell's output so that the book's prose can quote it.

The same output as ``myst_nb.glue`` (jupyter-book's ``{glue}`` roles and directives
find it by name), without importing myst-nb: a reader running a chapter on Colab or a
laptop needs only IPython, which every Jupyter kernel has. The book build, which has
myst-nb, reads the stored outputs as usual::

    glue("best_acc", f"{acc:.1%}", display=False)   # prose: {glue:}`best_acc`
"""

from __future__ import annotations

from typing import Any

__all__ = ["GLUE_PREFIX", "glue"]

GLUE_PREFIX = "application/papermill.record/"  # myst_nb.ext.glue.GLUE_PREFIX


def glue(name: str, value: Any, display: bool = True) -> None:
    """Display ``value`` (shown in the cell when ``display``, else hidden) under ``name``.

    Writes the display-data output that ``myst_nb.glue`` writes: ``value``'s formatted
    mime bundle (prefixed with :data:`GLUE_PREFIX` when hidden) and the metadata
    ``{"scrapbook": {"name": name, "mime_prefix": prefix}}``.
    """
    from IPython.core.formatters import format_display_data
    from IPython.display import display as ipython_display

    bundle, metadata = format_display_data(value)
    prefix = "" if display else GLUE_PREFIX
    metadata["scrapbook"] = {"name": name, "mime_prefix": prefix}
    ipython_display(
        {prefix + mime: data for mime, data in bundle.items()},
        raw=True,
        metadata=metadata,
    )
