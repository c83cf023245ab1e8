"""vitbook: what the book and its command line need around the course's package.

``going_modular`` is what a reader of the course imports (the data loaders, the training
loop and its hooks, the models); it never imports this package. This one builds on
it, in layers that import only downward (book -> the command line -> training ->
models, data -> ``going_modular``). Each subpackage's docstring lists its modules:

``training``  ``fit`` (the course's loop with recipes, checkpoints, a time budget,
              several processes and a NaN guard as its hooks), run folders, MLflow,
              timing and the fastest training step
``data``      the datasets online and their offline stand-ins, safe downloads, atomic
              files, image folders checked before a run, text data, augmentation on the
              device
``models``    torchvision's pretrained ViT-B/16, weight conversion, parameter and FLOP
              counts, chapter 7's shipped backbone
``cli``       the command line's parts, one subject each
``book``      what runs the chapters: settings, statistics, figures, explorers; the only
              part that reads ``BOOK_*`` variables

``train``     the full command line: ``python -m vitbook.train`` (or ``vit-train``)
"""

__all__ = ["__version__"]

__version__ = "0.2.0"
