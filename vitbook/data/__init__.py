"""Data: where images and text come from, checked before a run.

``datasets`` and ``text_datasets`` get the real data (online) or a labelled stand-in made of
real data that packages ship (``standins``, offline); ``download`` fetches safely and
``files`` writes atomically; ``image_folders`` checks a folder of images closely before a
long run; ``text_data`` turns text into padded token batches; ``gpu_augment`` augments
whole batches on the training device. Nothing here knows about training or the book.
"""

__all__: list[str] = []
