"""The models the book builds, each buildable by name with :func:`build_model`."""

from . import (
    cct,  # noqa: F401  (registers its factories)
    pretrained,  # noqa: F401  (registers its factory)
    tinyvgg,  # noqa: F401  (registers its factory)
    vit,  # noqa: F401  (registers its factories)
    vitbn,  # noqa: F401  (registers its factories)
)
from .registry import build_model, list_models, register_model

__all__ = ["build_model", "list_models", "register_model"]
