"""going_modular: the tested, importable versions of what the book's chapters build.

The top level is the course's own (learnpytorch's chapter 8): ``data_setup``
(``create_dataloaders``), ``engine`` (``train``, ``train_step``, ``test_step`` and the one
loop underneath, ``fit``), ``utils`` (``save_model``, seeds, the device), ``predictions``
(``pred_and_plot_image``) and the command line, ``train``, with its parts in ``cli``.
Everything deeper lives in four subpackages (and the CLI's in ``cli``); arrows point
only downward:
book -> top level and CLI -> training -> data, models.

``models``: what a network is
    ``models.layers``       one attention, one MLP, one block: every transformer's layers
    ``models.vit``          the Vision Transformer (ViT-B/16 and the small ViTs)
    ``models.cct``          the compact transformers for images: tokenizer, SeqPool, blocks
    ``models.cct_variants`` CCT, CVT and the registered ViT-Lite, CVT and CCT sizes
    ``models.text_cct``     the CCT for text
    ``models.vitbn``        the ViT with BatchNorm
    ``models.tinyvgg``      TinyVGG, the first model
    ``models.pretrained``   torchvision's pretrained ViT-B/16 as a feature extractor
    ``models.fashion_source`` chapter 7's backbone, shipped as data; its SHA-256 checked
    ``models.convert``      weights saved under other names: key maps and their loaders
    ``models.registry``     the name -> factory table
    ``models.checks``       checks of the hyper-parameters, naming a bad one
    ``models.complexity``   parameters, multiply-accumulates, FLOPs
``data``: where images and text come from
    ``data.paths``          where the project and its data folder are; where data come from
    ``data.files``          atomic writes and folders: a file is whole or absent
    ``data.checks``         the package's one set of argument checks (every layer uses them)
    ``data.network``        whether the network may be used; test fixtures announced
    ``data.download``       safe downloads: ``download_data``, its checks, SHA-256
    ``data.http_fetch``     one HTTP(S) transfer: status, deadlines, stalls, redirects
    ``data.archives``       unpacking a download: zip checks (members, bombs, free space)
    ``data.datasets``       image datasets: the real data online, a labelled stand-in offline
    ``data.text_datasets``  AG News, TREC and GloVe online, the docstring stand-in offline
    ``data.standins``       the offline stand-ins, made from data that packages ship
    ``data.text_data``      tokenizer, vocabulary, padded batches with masks
    ``data.loaders``        the one DataLoader builder: shuffled train, ordered test
    ``data.augment``        the CCT recipes' per-image transforms, MixUp/CutMix
    ``data.gpu_augment``    the recipes' augmentation on whole batches on the device:
    ``data.gpu_augment.ops``, ``data.gpu_augment.policies`` (RandAugment, AutoAugment)
    and ``data.gpu_augment.crops`` (crops, flips, random erasing)
``training``: everything ``fit`` needs besides the model and the data
    ``training.recipe``       a run's optimiser, schedule, loss, mixing and length
    ``training.cct_recipes``  the CCT authors' two CIFAR recipes
    ``training.optim``        weight decay groups, warmup + cosine
    ``training.loop``         ``fit``: the one training loop; ``evaluate``, callbacks
    ``training.steps``        one training pass: the steps and their NaN guard
    ``training.budget``       a run's time budget, resumed calls included
    ``training.distributed``  several processes (torchrun, DDP) for ``fit``
    ``training.seeding``      seeds and the device
    ``training.model_files``  save_model, load_model: checksummed model files
    ``training.checkpoint``   what ``fit`` saves after each epoch, and resuming from it
    ``training.divergence``   NaN and exploding losses: the errors that stop a run
    ``training.runs``         run folders: one per run, a lock, ``latest``
    ``training.tracking``     MLflow in a SQLite file inside the project
    ``training.experiments``  small experiments over subsets and seeds, mean and spread
    ``training.timing``       images per second, training or inference
    ``training.speed``        the fastest training step measured; steps for a time budget
    ``training.clock``        runs against the clock, several side by side in processes
    ``training.source_backbone`` pre-training chapter 7's backbone on some classes
    ``training.plots``        loss and accuracy curves, runs compared
``book``: what runs the chapters (the only part that reads ``BOOK_*`` variables)
    ``book.settings``         quick/cpu/gpu/full, offline, dry run, ``claim``
    ``book.stats``            claims that compare runs over seeds (``claim_beats`` ...)
    ``book.glue``             values the prose quotes
    ``book.style``            the book's one look for figures and tables
    ``book.diagrams``         the block diagrams the chapters draw
    ``book.attention_maps``   class-token maps, attention rollout, attention distance
    ``book.reference``        ``agree``: a piece checked against a reference implementation
    ``book.explorers``        interactive explorers that work offline on the rendered page
    ``book.widgets``          the same explorers live (ipywidgets) where a kernel runs
    ``book.self_check``       self-check questions, answers folded until clicked
``cli``: the command line's parts below ``train``, one subject each
    ``cli.options``     the parser, its number checks, ``configure``: the only reader of
                        the parsed options
    ``cli.config``      ``RunConfig``: the checked options every step below receives
    ``cli.errors``      what ends a run, and how: ``UsageError`` and the run's failures
    ``cli.output_dir``  the ``--output-dir``: refused early when unusable, locked for the run
    ``cli.resume``      what a ``--resume`` continues, checked to be the run's own
    ``cli.parts``       the data, the model and the recipe a config asks for
    ``cli.ranks``       under torchrun: what rank 0 does for the others, who speaks
    ``cli.stops``       a stop or a failure: what is kept, and the one line said
The top level
    ``data_setup``  ``engine``  ``utils``  ``predictions``  ``train``
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
