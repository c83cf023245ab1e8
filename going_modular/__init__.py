"""going_modular: the tested, importable versions of what the book's chapters build.

Modules: ``settings`` (quick/full and offline switches), ``datasets`` and ``standins``
(real data online, honest stand-ins offline), ``data_setup`` (DataLoaders), ``engine``
(training loop), ``optim`` (weight decay groups, warmup + cosine), ``utils`` (seeds,
device, checkpoints), ``plots``, ``predictions``, ``models`` and the ``train`` CLI.
"""

__version__ = "0.1.0"
