"""Self-check questions: each answer and its one-line explanation stay folded until clicked.

Plain ``<details>``/``<summary>`` HTML: no script, works offline, in the static book, Jupyter
and Colab, and with a keyboard or a screen reader. Numeric answers are computed by the
caller from the package, e.g. ``("Parameters of ViT-B/16?", f"{count_params(vit_b_16()):,}",
"...")``.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

__all__ = ["SelfCheck", "self_check"]

_STYLE = 'style="margin: 0.4em 0; padding: 0.2em 0.6em; border-left: 3px solid #1f77b4"'


class SelfCheck:
    """Questions with folded answers; ``_repr_html_`` for notebooks, ``__repr__`` for text."""

    def __init__(self, questions: Sequence[tuple[str, object, str]]):
        if not questions:
            raise ValueError("Give at least one (question, answer, explanation).")
        for item in questions:
            if len(item) != 3 or not all(str(part).strip() for part in item):
                raise ValueError(
                    f"Each question is (question, answer, explanation), got {item!r}."
                )
        self.questions = [tuple(str(part) for part in item) for item in questions]

    def _repr_html_(self) -> str:
        items = "".join(
            f"<details {_STYLE}><summary><b>Q{i}.</b> {html.escape(question)}</summary>"
            f"<p><b>{html.escape(answer)}</b>: {html.escape(why)}</p></details>"
            for i, (question, answer, why) in enumerate(self.questions, 1)
        )
        return f'<div class="vx-check">{items}</div>'

    def __repr__(self) -> str:
        return "\n".join(
            f"Q{i}. {question}" for i, (question, _, _) in enumerate(self.questions, 1)
        )


def self_check(questions: Sequence[tuple[str, object, str]]) -> SelfCheck:
    """3-5 ``(question, answer, explanation)`` triples -> a displayable self-check."""
    return SelfCheck(questions)
