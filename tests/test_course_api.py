"""The course's calls, as a reader of its "PyTorch Going Modular" chapter writes them,
work unchanged: create_dataloaders, engine.train (and train_step/test_step), plot_loss_curves,
utils.save_model and predictions.pred_and_plot_image."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pytest
import torch
from PIL import Image
from skimage import data as photos
from torchvision import transforms

from going_modular import data_setup, engine, utils
from going_modular.models.tinyvgg import TinyVGG
from going_modular.predictions import pred_and_plot_image
from vitbook.training.plots import plot_loss_curves

PHOTOS = {"cat": photos.chelsea, "coffee": photos.coffee, "rocket": photos.rocket}


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    """An ImageFolder of three classes, each photo cut into 64x64 crops: 6 training and
    2 test crops per class."""
    root = tmp_path_factory.mktemp("course") / "photos"
    for name, photo in PHOTOS.items():
        image = photo()
        crops = [
            image[r : r + 64, c : c + 64] for r in (0, 100, 200) for c in (0, 150, 300)
        ][:8]
        for k, crop in enumerate(crops):
            split = "train" if k < 6 else "test"
            (root / split / name).mkdir(parents=True, exist_ok=True)
            Image.fromarray(crop).save(root / split / name / f"{k}.jpg")
    return root


def test_the_course_script_runs_unchanged(image_folder, tmp_path, capsys):
    torch.manual_seed(42)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    data_transform = transforms.Compose(
        [transforms.Resize((64, 64)), transforms.ToTensor()]
    )
    train_dataloader, test_dataloader, class_names = data_setup.create_dataloaders(
        train_dir=image_folder / "train",
        test_dir=image_folder / "test",
        transform=data_transform,
        batch_size=4,
    )
    assert class_names == ["cat", "coffee", "rocket"]
    model = TinyVGG(3, 10, len(class_names)).to(device)
    loss_fn = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
    before = [p.detach().clone() for p in model.parameters()]

    results = engine.train(
        model=model,
        train_dataloader=train_dataloader,
        test_dataloader=test_dataloader,
        loss_fn=loss_fn,
        optimizer=optimizer,
        epochs=2,
        device=device,
    )

    assert list(results) == ["train_loss", "train_acc", "test_loss", "test_acc"]
    assert all(len(values) == 2 for values in results.values())
    assert all(
        isinstance(v, float) and math.isfinite(v) for v in sum(results.values(), [])
    )
    assert all(0 <= v <= 1 for v in results["train_acc"] + results["test_acc"])
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert optimizer.state  # the reader's own optimiser took the steps
    printed = capsys.readouterr().out
    assert "Epoch: 1 | train_loss: " in printed and "Epoch: 2 | " in printed
    assert f"test_acc: {results['test_acc'][1]:.4f}" in printed

    figure = plot_loss_curves(results)
    assert len(figure.axes) == 2 and len(figure.axes[0].lines) == 2
    assert list(figure.axes[0].lines[0].get_ydata()) == results["train_loss"]

    path = utils.save_model(
        model=model,
        target_dir=tmp_path / "models",
        model_name="05_going_modular_script_mode_tinyvgg_model.pth",
    )
    reloaded = utils.load_model(path, TinyVGG(3, 10, len(class_names)))
    for name, value in model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[name], value.cpu())

    image_path = next((image_folder / "test" / "rocket").glob("*.jpg"))
    plt.close("all")
    label, prob = pred_and_plot_image(
        model=model,
        class_names=class_names,
        image_path=image_path,
        image_size=(64, 64),
        transform=None,
        device=device,
    )
    assert label in class_names and 0 < prob <= 1
    assert plt.gca().get_title() == f"Pred: {label} | Prob: {prob:.3f}"
    plt.close("all")


def test_train_step_and_test_step_return_floats(image_folder):
    torch.manual_seed(0)
    transform = transforms.ToTensor()
    train_dataloader, test_dataloader, class_names = data_setup.create_dataloaders(
        image_folder / "train", image_folder / "test", transform, batch_size=5
    )
    model = TinyVGG(3, 8, len(class_names))
    loss_fn = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    train_loss, train_acc = engine.train_step(
        model, train_dataloader, loss_fn, optimizer, "cpu"
    )
    test_loss, test_acc = engine.test_step(model, test_dataloader, loss_fn, "cpu")
    for value in (train_loss, train_acc, test_loss, test_acc):
        assert isinstance(value, float) and math.isfinite(value)
    X, y = next(iter(test_dataloader))
    assert len(y) == 5  # 6 test crops: a batch of 5 and one of 1, weighed per sample
    with torch.inference_mode():
        logits = torch.cat([model(X) for X, _ in test_dataloader])
    labels = torch.cat([y for _, y in test_dataloader])
    assert test_loss == pytest.approx(loss_fn(logits, labels).item(), rel=1e-5)
    assert test_acc == pytest.approx((logits.argmax(1) == labels).float().mean().item())
