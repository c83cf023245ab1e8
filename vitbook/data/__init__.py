"""Data: where images and text come from, checked before a run. Nothing here knows about
training or the book.

``data.datasets``              image datasets: the real data online, a stand-in offline
``data.text_datasets``         AG News, TREC and GloVe online, the docstring stand-in
                               offline
``data.standins``              the offline stand-ins, made from data that packages ship
``data.download``              safe downloads: ``download_data``, its checks, SHA-256
``data.http_fetch``            one HTTP(S) fetch: status, deadlines, stalls, redirects
``data.archives``              unpacking a download: zip checks (members, bombs, space)
``data.network``               whether the network may be used; test fixtures announced
``data.paths``                 where the project and its data folder are; data sources
``data.files``                 atomic writes and folders: a file is whole or absent
``data.image_folders``         folders of images checked closely before a long run
``data.text_data``             tokenizer, vocabulary, padded batches with masks
``data.gpu_augment``           the recipes' augmentation on whole batches on the device
``data.gpu_augment.ops``       the batched image operations
``data.gpu_augment.policies``  RandAugment and AutoAugment
``data.gpu_augment.crops``     crops, flips, random erasing
"""

__all__: list[str] = []
