"""A name -> factory table, so the CLI, checkpoints and chapters build models by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

__all__ = ["build_model", "list_models", "register_model"]

ModelFactory = Callable[..., nn.Module]
_REGISTRY: dict[str, ModelFactory] = {}


def register_model(
    name_or_factory: str | ModelFactory,
) -> ModelFactory | Callable[[ModelFactory], ModelFactory]:
    """Decorator: make a factory buildable as ``build_model(name, ...)``.

    ``@register_model`` registers the function under its own name, ``@register_model("name")``
    under ``name``.
    """
    if callable(name_or_factory):
        return register_model(name_or_factory.__name__)(name_or_factory)
    name = name_or_factory

    def decorator(factory: ModelFactory) -> ModelFactory:
        if name in _REGISTRY:
            raise ValueError(f"A model named {name!r} is registered twice.")
        _REGISTRY[name] = factory
        return factory

    return decorator


def list_models() -> list[str]:
    """The names ``build_model`` accepts, sorted."""
    return sorted(_REGISTRY)


def build_model(name: str, **kwargs: Any) -> nn.Module:
    """Build the registered model ``name`` with keyword arguments such as ``num_classes``.

    The model remembers how it was built (``model.build_config``), so that a checkpoint
    saved with :func:`going_modular.utils.save_model` can rebuild it.
    """
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"Unknown model {name!r}. Choose one of: {', '.join(list_models())}."
        ) from None
    model = factory(**kwargs)
    model.build_config = {"name": name, "kwargs": dict(kwargs)}
    return model
