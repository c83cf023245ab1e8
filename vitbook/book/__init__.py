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
``book.exercises``       exercises a student can check: ``check``, ``hint``, ``solution``
``book.exercises.ch00``  chapter 0's exercises
``book.exercises.ch01``  chapter 1's exercises
``book.exercises.ch02``  chapter 2's exercises
``book.exercises.ch03``  chapter 3's exercises
``book.exercises.ch04``  chapter 4's exercises
``book.exercises.ch05``  chapter 5's exercises
``book.exercises.ch08``  chapter 8's exercises
``book.exercises.ch10``  chapter 10's exercises
``book.exercises.ch13``  chapter 13's exercises
``book.exercises.ch14``  chapter 14's exercises
``book.built.ch02``      chapter 2's ``PatchEmbedding``, as the chapter writes it
``book.built.ch03``      chapter 3's ``Attention``, as the chapter writes it
``book.built.ch04``      chapter 4's ``Mlp`` and ``Block``, as the chapter writes it
``book.built.ch05``      chapter 5's ``ViT``, assembled from chapters 2-4, as the chapter writes it
``book.ch10_lab``       chapter 10's small-data runs (two side by side) and its pixel baseline
"""

__all__: list[str] = []
