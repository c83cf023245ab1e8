"""The book's machinery: what runs the chapters, never what a reader's own code needs.
Only this part reads ``BOOK_*`` variables; the rest of ``vitbook`` never imports it.

``book.settings``        the ``BOOK_*`` switches: quick/cpu/gpu/full, offline, dry run,
                         ``claim``
``book.stats``           claims that compare runs over seeds (``claim_beats`` ...)
``book.glue``            values the prose quotes
``book.style``           the book's one look for figures and tables
``book.diagrams``        the block diagrams the chapters draw
``book.attention_maps``  class-token maps, attention rollout, attention distance
``book.reference``       ``agree``: a piece checked against a reference implementation
``book.explorers``       interactive explorers that work offline on the rendered page
``book.widgets``         the same explorers live (ipywidgets) where a kernel runs
``book.self_check``      self-check questions, answers folded until clicked
"""

__all__: list[str] = []
