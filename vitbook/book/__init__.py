"""The book's machinery: what runs the chapters, never what a reader's own code needs.

``settings`` (the ``BOOK_*`` switches: quick/cpu/gpu/full, offline, dry run, ``claim``),
``stats`` (claims that compare runs over seeds: ``claim_beats`` and the like),
``glue`` (numbers the prose quotes), ``style`` (one look for figures and tables),
``diagrams``, ``attention_maps`` and ``reference`` (a piece checked against a reference
implementation). Only this part reads ``BOOK_*`` variables; the library never imports it.
"""

__all__: list[str] = []
