"""Training: everything ``fit`` needs besides the model and the data. It builds on
``data`` and ``models``, never on the book.

``training.loop``             ``fit``: the course's ``engine.train`` with the book's
                              extras as its hooks; ``evaluate``, callbacks
``training.steps``            what ``fit`` feeds the loop: batches under a progress bar,
                              the NaN check kept on the device
``training.budget``           a run's time budget, resumed calls included
``training.distributed``      several processes (torchrun, DDP) for ``fit``
``training.checkpoint``       what ``fit`` saves after each epoch, and resuming from it
``training.divergence``       NaN and exploding losses: the errors that stop a run
``training.recipe``           a run's optimiser, schedule, loss, mixing and length
``training.cct_recipes``      the CCT authors' two CIFAR recipes
``training.optim``            weight decay groups, warmup + cosine
``training.model_files``      ``save_model``, ``load_model``: checksummed model files
``training.runs``             run folders: one per run, a lock, ``latest``
``training.tracking``         MLflow in a SQLite file inside the project
``training.experiments``      small experiments over subsets and seeds, mean and spread
``training.timing``           images per second, training or inference
``training.speed``            the fastest training step; steps for a time budget
``training.clock``            runs against the clock, several side by side in processes
``training.source_backbone``  pre-training chapter 7's backbone on some classes
``training.plots``            loss and accuracy curves, runs compared
"""

__all__: list[str] = []
