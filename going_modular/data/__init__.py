"""Data: where images and text come from and how they reach a model.

``datasets`` and ``text_datasets`` get the real data (online) or a labelled stand-in made of
real data that packages ship (``standins``, offline); ``download`` fetches safely and
``files`` writes atomically; ``text_data`` turns text into padded token batches; ``augment``
(per image) and ``gpu_augment`` (per batch, on the training device) are the CCT recipes'
augmentations. Nothing here knows about models, training or the book.
"""

__all__: list[str] = []
