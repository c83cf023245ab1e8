"""vitbook: everything around the course's package that the book and its command line need.

``going_modular`` is what a reader of the course imports (the data loaders, the training
loop, the models); it never imports this package. This one builds on it, in layers that
import only downward (book -> the command line -> training -> data, models):

``training``  ``fit`` (the course's loop with recipes, checkpoints, a time budget, several
              processes and a NaN guard as its hooks), run folders, MLflow, timing and the
              fastest training step
``data``      the datasets online and their offline stand-ins, safe downloads, atomic files,
              image folders checked before a run, text data, augmentation on the device
``models``    torchvision's pretrained ViT-B/16, weight conversion, parameter and FLOP
              counts, chapter 7's shipped backbone
``cli``       the command line's parts (``python -m vitbook.train``)
``book``      what runs the chapters: settings, statistics, figures, explorers; the only
              part that reads ``BOOK_*`` variables
"""

__all__ = ["__version__"]

__version__ = "0.2.0"
