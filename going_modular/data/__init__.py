"""Data for training: the DataLoader builder (``loaders``), the CCT recipes' augmentation
per image and MixUp/CutMix (``augment``), and the argument checks every layer uses
(``checks``)."""

__all__: list[str] = []
