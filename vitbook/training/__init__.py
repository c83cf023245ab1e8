"""Training: everything ``fit`` needs besides the model and the data.

``recipe`` (a run's optimiser, schedule, loss, mixing and length) with ``optim`` and
``cct_recipes``; ``checkpoint`` and ``divergence`` (what ``fit`` saves and what stops it);
``runs`` (one folder per run), ``tracking`` (MLflow), ``experiments`` (over seeds),
``timing`` (images per second), ``speed`` (the fastest step, steps for a budget),
``clock`` (runs against the clock, side by side) and ``plots`` (loss curves). It builds on
``data`` and ``models``, never on the book.
"""

__all__: list[str] = []
