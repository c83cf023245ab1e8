"""going_modular: the course's package, the tested versions of what the chapters build.

The course's modules (learnpytorch's "PyTorch Going Modular" chapter), whose calls work
unchanged:

``data_setup``     ``create_dataloaders``: two folders of images -> DataLoaders
``engine``         ``train_step``, ``test_step``, ``train``: the training loop, and the
                   ``Hooks`` through which a caller adds to it
``model_builder``  ``TinyVGG`` with the course's arguments; any model by name
``utils``          ``save_model`` (a ``state_dict``), ``load_model``, seeds, the device
``predictions``    ``pred_and_plot_image``: one image's prediction shown; a grid of them
``train``          the course's script: ``python -m going_modular.train --help``

The models (``models``), each buildable by name with ``models.build_model``:

``models.layers``        one attention, one MLP, one block: every transformer's layers
``models.vit``           the Vision Transformer (ViT-B/16 and the small ViTs)
``models.cct``           the compact transformers: tokenizer, SeqPool, blocks
``models.cct_variants``  CCT, CVT and ViT-Lite in the paper's sizes
``models.text_cct``      the CCT for text
``models.vitbn``         the ViT with BatchNorm (chapter 12)
``models.tinyvgg``       TinyVGG, the first model
``models.registry``      the name -> factory table
``models.checks``        checks of the hyper-parameters, naming a bad one

And what feeds them (``data``):

``data.loaders``  the DataLoader builder: shuffled train, ordered test
``data.augment``  the CCT recipes' per-image augmentation, MixUp/CutMix
``data.checks``   the argument checks every module uses

This package never imports ``vitbook``, the book's machinery (the full command line,
recipes and ``fit``, downloads and offline stand-ins, speed work, the chapters'
settings), and reads no environment variable.
"""

__all__ = ["__version__"]

__version__ = "0.2.0"
