"""vitbook.book.glue writes exactly the output myst_nb.glue writes (the book build reads
it), without importing myst-nb."""

import subprocess
import sys

import matplotlib
import pandas as pd
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.pylabtools import select_figure_formats
from IPython.utils.capture import capture_output

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from vitbook.book.glue import GLUE_PREFIX, glue  # noqa: E402

myst_glue = pytest.importorskip("myst_nb.ext.glue")


def _outputs(function, name, value, display):
    InteractiveShell.instance()
    with capture_output() as captured:
        function(name, value, display=display)
    return [(out.data, out.metadata) for out in captured.outputs]


@pytest.mark.parametrize("display", [True, False])
@pytest.mark.parametrize(
    "value",
    ["81.5%", 0.815, pd.DataFrame({"acc": [0.8, 0.9]})],
    ids=["str", "float", "dataframe"],
)
def test_same_output_as_myst_nb(value, display):
    ours = _outputs(glue, "x", value, display)
    theirs = _outputs(myst_glue.glue, "x", value, display)
    assert ours == theirs
    assert len(ours) == 1
    data, metadata = ours[0]
    assert metadata["scrapbook"] == {
        "name": "x",
        "mime_prefix": "" if display else GLUE_PREFIX,
    }
    assert all(mime.startswith(GLUE_PREFIX) != display for mime in data)


def test_same_figure_output_as_myst_nb():
    select_figure_formats(InteractiveShell.instance(), {"png"})  # as inline plots do
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [1, 0])
    ours = _outputs(glue, "fig", fig, False)
    theirs = _outputs(myst_glue.glue, "fig", fig, False)
    plt.close(fig)
    assert ours == theirs
    assert GLUE_PREFIX + "image/png" in ours[0][0]


def test_prefix_is_myst_nbs():
    assert GLUE_PREFIX == myst_glue.GLUE_PREFIX


def test_glue_does_not_import_myst_nb():
    code = (
        "import sys; from vitbook.book.glue import glue; "
        "glue('a', 1); assert 'myst_nb' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
