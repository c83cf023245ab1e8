"""The course's helpers, where its readers look for them: ``from helper_functions import ...``.

Each is the package's own function, imported from the module that defines it (the chapters
import everything else from its module in ``going_modular``, so a reader learns the layout):

* ``plot_loss_curves``: train and test loss and accuracy against the epoch;
* ``pred_and_plot_image``: predict one image's class and show it with the prediction;
* ``set_seeds``: seed Python, NumPy and PyTorch;
* ``walk_through_dir``: how many folders and images each folder holds;
* ``download_data``: download a zip into ``data/<destination>`` and unzip it (offline it
  raises ``DownloadError`` saying so).
"""

from going_modular.data_setup import walk_through_dir
from going_modular.predictions import pred_and_plot_image
from going_modular.utils import set_seeds
from vitbook.data.download import download_data
from vitbook.training.plots import plot_loss_curves

__all__ = [
    "download_data",
    "plot_loss_curves",
    "pred_and_plot_image",
    "set_seeds",
    "walk_through_dir",
]
