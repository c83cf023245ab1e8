"""The models, as the course's ``model_builder.py`` offers them: ``TinyVGG`` with the
course's arguments, and every model of the book by name::

    model = model_builder.TinyVGG(input_shape=3, hidden_units=10, output_shape=3)
    model = model_builder.build_model("cct_7_3x1", num_classes=10)
"""

from going_modular.models import build_model, list_models
from going_modular.models.tinyvgg import TinyVGG

__all__ = ["TinyVGG", "build_model", "list_models"]
