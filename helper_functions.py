"""The helpers the chapters import, in one place: ``from helper_functions import ...``.

Each is implemented once, in the ``going_modular`` package, and re-exported here so that
readers of the original course find them under the names they know.
"""

from going_modular.data_setup import walk_through_dir
from going_modular.download import download_data
from going_modular.glue import glue
from going_modular.plots import compare_runs, plot_loss_curves
from going_modular.predictions import pred_and_plot_image
from going_modular.settings import (
    claim,
    describe_setting,
    is_offline,
    is_quick,
    pick,
    run_report,
)
from going_modular.style import figsize, show_images, table, use_book_style
from going_modular.utils import get_device, set_seeds

__all__ = [
    "claim",
    "compare_runs",
    "describe_setting",
    "download_data",
    "figsize",
    "get_device",
    "glue",
    "is_offline",
    "is_quick",
    "pick",
    "plot_loss_curves",
    "pred_and_plot_image",
    "run_report",
    "set_seeds",
    "show_images",
    "table",
    "use_book_style",
    "walk_through_dir",
]
