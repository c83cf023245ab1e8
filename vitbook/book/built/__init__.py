"""The classes Part I builds, saved exactly as chapters 2-4 write them, for the chapters after
them to build on: chapter 4's block uses chapter 3's attention, chapter 5's ViT is assembled
from chapters 2-4 (each chapter runs alone, so it imports what earlier chapters wrote from
here). ``tests/book/test_built.py`` checks each class against its chapter's cell; the final
proof, a strict ``load_state_dict`` into the package's classes, is chapter 5's.
"""

__all__: list[str] = []
