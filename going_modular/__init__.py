"""going_modular: the tested, importable versions of what the book's chapters build.

Each module does one thing. The chapters import every name they use from one place,
``helper_functions``, which imports each from the module below that declares it.

Switches, files and downloads
    ``settings``        the book's switches (quick/cpu/gpu/full, offline, dry run), ``claim``
    ``paths``           where the project and its ``data/`` folder are
    ``files``           atomic writes and folders: a file is whole or absent
    ``download``        safe downloads: checked status, time limits, SHA-256, atomic unpacking
Data
    ``datasets``        image datasets: the real data online, a labelled stand-in offline
    ``text_datasets``   AG News, TREC and GloVe online, the docstring stand-in offline
    ``standins``        the offline stand-ins, made from data that packages ship
    ``data_setup``      DataLoaders from image folders, with clear errors for bad images
    ``text_data``       tokenizer, vocabulary, padded batches with masks
    ``augment``         the CCT recipes' data pieces: per-image transforms, MixUp/CutMix
    ``gpu_augment``     the recipes' augmentation on whole batches on the training device
    ``gpu_augment_ops``       batched twins of the PIL operations of RandAugment/AutoAugment
    ``gpu_augment_policies``  RandAugment and AutoAugment on a batch
    ``gpu_augment_crops``     crops, flips and random erasing on a batch
Models (``models``: each built by name with ``build_model``)
    ``models.layers``       one attention, one MLP, one block: every transformer's layers
    ``models.vit``          the Vision Transformer (ViT-B/16 and the small ViTs)
    ``models.cct``          ViT-Lite, CVT and CCT for images
    ``models.text_cct``     the CCT for text
    ``models.vitbn``        the ViT with BatchNorm
    ``models.tinyvgg``      TinyVGG, the first model
    ``models.pretrained``   torchvision's pretrained ViT-B/16 as a feature extractor
    ``models.registry``     the name -> factory table
    ``models.checks``       checks of the hyper-parameters, naming a bad one
    ``models.complexity``   parameters, multiply-accumulates, FLOPs
Training
    ``recipe``          a run's optimiser, schedule, loss, mixing and length: ``Recipe``
    ``cct_recipes``     the CCT authors' two CIFAR recipes: hyper-parameters, schedules
    ``optim``           weight decay groups, warmup + cosine
    ``engine``          ``fit``: the one training loop, with clear errors when it diverges
    ``divergence``      NaN and exploding losses: the errors that stop a run, and their causes
    ``checkpoint``      what ``fit`` saves after each epoch, and resuming from it
    ``experiments``     small experiments over subsets and seeds, mean and spread
    ``timing``          images per second, training or inference
    ``tracking``        MLflow in a SQLite file inside the project
    ``utils``           seeds, the device, checkpoints that rebuild their model
Looking at models
    ``attention_maps``  class-token maps, attention rollout, attention distance
    ``predictions``     predictions on images and a grid of them
    ``plots``           loss and accuracy curves, runs compared
    ``diagrams``        the block diagrams the chapters draw
    ``reference``       ``agree``: a piece checked against a reference implementation
    ``style``           the book's one look for figures and tables
    ``glue``            values the prose quotes, as myst-nb's ``glue`` stores them
The command line (``python -m going_modular.train``, ``vit-train``)
    ``cli``             the options and the checks that refuse bad ones before any work
    ``train``           one run: data, model, ``fit``, saving; exit codes on stops and failures
    ``runs``            run folders: one per run, a lock, ``latest``, what a stop keeps
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
