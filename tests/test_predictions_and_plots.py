"""Predictions on single images, the prediction grid and the plots."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402
from torch import nn  # noqa: E402
from torchvision import transforms  # noqa: E402

from going_modular import predictions  # noqa: E402
from going_modular.models import build_model  # noqa: E402
from vitbook.training import plots  # noqa: E402


class _AlwaysSecond(nn.Module):
    def forward(self, x):
        return torch.tensor([[0.0, 5.0, 0.0]]).expand(x.shape[0], 3)


def test_pred_and_plot_image(texture_photos):
    image = next((texture_photos / "test" / "grass").glob("*.jpg"))
    label, prob = predictions.pred_and_plot_image(
        _AlwaysSecond(), ["brick", "grass", "gravel"], image, image_size=(64, 64)
    )
    assert label == "grass"
    assert prob == pytest.approx(
        torch.softmax(torch.tensor([0.0, 5.0, 0.0]), 0)[1].item()
    )
    assert "Pred: grass" in matplotlib.pyplot.gca().get_title()


def test_prediction_on_corrupt_image(tmp_path):
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"nope")
    with pytest.raises(ValueError, match="Cannot decode image"):
        predictions.pred_and_plot_image(_AlwaysSecond(), ["a", "b", "c"], bad)


def test_prediction_grid_colours_right_and_wrong(texture_photos):
    from torchvision.datasets import ImageFolder

    dataset = ImageFolder(
        texture_photos / "test",
        transform=transforms.Compose(
            [transforms.Resize((32, 32)), transforms.ToTensor()]
        ),
    )
    fig = predictions.plot_prediction_grid(
        _AlwaysSecond(), dataset, dataset.classes, n=9
    )
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert len(titles) == 9
    for ax in fig.axes:
        if ax.get_title():
            right = "true: grass" in ax.get_title()
            assert matplotlib.colors.same_color(
                ax.title.get_color(), "green" if right else "red"
            )


def test_plot_loss_curves_and_compare_runs():
    results = {
        "train_loss": [1.0, 0.5],
        "test_loss": [1.1, 0.7],
        "train_acc": [0.4, 0.8],
        "test_acc": [0.3, 0.6],
    }
    fig = plots.plot_loss_curves(results)
    loss_ax = fig.axes[0]
    assert [line.get_label() for line in loss_ax.get_lines()] == [
        "train loss",
        "test loss",
    ]
    assert list(loss_ax.get_lines()[1].get_ydata()) == [1.1, 0.7]
    fig = plots.compare_runs({"a": results, "b": results})
    assert [line.get_label() for line in fig.axes[1].get_lines()] == ["a", "b"]


def test_tinyvgg_needs_a_real_image_size():
    with pytest.raises(ValueError, match="at least 4x4"):
        build_model("tinyvgg", img_size=2)


def test_tensor_to_image_undoes_per_channel_normalisation():
    gray = torch.rand(1, 8, 8).expand(3, 8, 8)
    normalise = transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    image = predictions.tensor_to_image(normalise(gray))
    assert image.shape == (8, 8, 3)
    assert image.min() >= 0 and image.max() <= 1
    assert torch.allclose(
        torch.from_numpy(image[..., 0]), torch.from_numpy(image[..., 2]), atol=1e-5
    )


def test_prediction_on_a_missing_file_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="No image file at .*missing.jpg"):
        predictions.pred_and_plot_image(
            _AlwaysSecond(), ["a", "b", "c"], tmp_path / "missing.jpg"
        )


def test_class_names_that_do_not_match_the_model(texture_photos):
    image = next((texture_photos / "test" / "grass").glob("*.jpg"))
    with pytest.raises(ValueError, match="3 class scores but 2 class names"):
        predictions.pred_and_plot_image(_AlwaysSecond(), ["a", "b"], image, (32, 32))


def test_a_dollar_in_a_title_is_drawn_literally():
    results = {
        k: [1.0, 0.5] for k in ("train_loss", "test_loss", "train_acc", "test_acc")
    }
    figure = plots.plot_loss_curves(results, title="run in data/$x_$")
    figure.canvas.draw()  # as maths "$x_$" is a syntax error (ValueError)
    assert figure._suptitle.get_text() == r"run in data/\$x_\$"
    matplotlib.pyplot.close(figure)


def test_prediction_on_too_many_pixels_names_the_file(tmp_path, monkeypatch):
    huge = tmp_path / "huge.png"
    Image.new("L", (64, 64)).save(huge)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # 4096 pixels: a "bomb"
    with pytest.raises(ValueError, match=f"Cannot decode image {huge}: .*pixels"):
        predictions.pred_and_plot_image(_AlwaysSecond(), ["a", "b", "c"], huge)
