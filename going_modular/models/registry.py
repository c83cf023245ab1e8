"""A name -> factory table, so the CLI, checkpoints and chapters build models by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

__all__ = ["build_model", "list_models", "register_model", "register_variant"]

ModelFactory = Callable[..., nn.Module]
_REGISTRY: dict[str, ModelFactory] = {}


def register_model(name: str) -> Callable[[ModelFactory], ModelFactory]:
    """Decorator: make ``factory`` buildable as ``build_model(name, ...)``."""

    def decorator(factory: ModelFactory) -> ModelFactory:
        if name in _REGISTRY:
            raise ValueError(f"A model named {name!r} is registered twice.")
        _REGISTRY[name] = factory
        return factory

    return decorator


def register_variant(
    name: str, cls: Callable[..., nn.Module], doc: str, **config: Any
) -> ModelFactory:
    """Register ``name`` as ``cls`` built with ``config``: ``build_model(name, **overrides)``
    returns ``cls(**(config | overrides))``. Returns the factory, named ``name`` in the
    module of ``cls``."""

    def factory(**overrides: Any) -> nn.Module:
        return cls(**(config | overrides))

    settings = ", ".join(f"{key}={value!r}" for key, value in config.items())
    factory.__name__ = factory.__qualname__ = name
    # where the variant is declared: beside its class
    factory.__module__ = cls.__module__
    factory.__doc__ = (
        f"{doc}\n\n``{cls.__name__}({settings})``; any argument can be overridden."
    )
    return register_model(name)(factory)


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
