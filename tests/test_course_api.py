"""The course's calls, as a reader of its "PyTorch Going Modular" chapter writes them,
work unchanged: create_dataloaders, engine.train (and train_step/test_step), plot_loss_curves,
utils.save_model and predictions.pred_and_plot_image."""

from __future__ import annotations

import math
import os
import shutil
import stat

import matplotlib.pyplot as plt
import pytest
import torch
from PIL import Image
from skimage import data as photos
from torchvision import transforms

from going_modular import data_setup, engine, model_builder, utils
from going_modular import train as course_train
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


# Bad input gets a plain message before or at the first step.


def _tiny_loaders(n=8, size=16, classes=3):
    torch.manual_seed(0)
    X, y = torch.randn(n, 3, size, size), torch.arange(n) % classes
    data = torch.utils.data.TensorDataset(X, y)
    return torch.utils.data.DataLoader(data, batch_size=4)


def _course_train(model, loader, optimizer=None, device="cpu"):
    optimizer = optimizer or torch.optim.SGD(model.parameters(), lr=0.01)
    return engine.train(
        model, loader, loader, optimizer, torch.nn.CrossEntropyLoss(), 1, device
    )


def test_labels_beyond_the_models_classes_are_named():
    loader = _tiny_loaders(classes=5)
    with pytest.raises(IndexError, match=r"labels 0\.\.3: .*number of classes covers"):
        _course_train(TinyVGG(3, 4, 3, img_size=16), loader)


def test_images_of_another_size_than_the_models_are_named():
    loader = _tiny_loaders(size=32)
    with pytest.raises(
        RuntimeError, match=r"images of shape \(3, 32, 32\).*image size"
    ):
        _course_train(TinyVGG(3, 4, 3, img_size=16), loader)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_a_gpu_is_refused_before_training():
    with pytest.raises(ValueError, match="there is no CUDA GPU"):
        _course_train(TinyVGG(3, 4, 3, img_size=16), _tiny_loaders(), device="cuda")


def test_an_optimiser_of_another_model_is_refused():
    model, other = TinyVGG(3, 4, 3, img_size=16), TinyVGG(3, 4, 3, img_size=16)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match="holds none of this model's parameters"):
        _course_train(model, _tiny_loaders(), torch.optim.SGD(other.parameters(), 0.1))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_create_dataloaders_without_a_transform_says_so(image_folder):
    with pytest.raises(ValueError, match="transform is None"):
        data_setup.create_dataloaders(
            image_folder / "train", image_folder / "test", None, 4
        )


def test_a_dollar_in_a_class_name_is_shown_literally(image_folder):
    model = TinyVGG(3, 4, 3)
    image_path = next((image_folder / "test" / "rocket").glob("*.jpg"))
    names = ["$x_$", "$y^$", "$z{$"]  # as maths each is a syntax error
    label, _ = pred_and_plot_image(model, names, image_path, (64, 64))
    plt.gcf().canvas.draw()  # raised ValueError when the title was read as maths
    assert plt.gca().get_title().startswith("Pred: " + label.replace("$", "\\$"))
    plt.close("all")


def test_save_model_writes_a_plain_state_dict_the_course_reloads(tmp_path):
    model = TinyVGG(3, 4, 3, img_size=16)
    model.build_config = {
        "name": "tinyvgg",
        "kwargs": {"img_size": 16, "hidden_units": 4},
    }
    path = utils.save_model(model, tmp_path / "models", "tiny.pth")
    again = TinyVGG(3, 4, 3, img_size=16)
    again.load_state_dict(torch.load(path))  # the course's reload, unchanged
    x = torch.randn(2, 3, 16, 16)
    assert torch.equal(model.eval()(x), again.eval()(x))
    rebuilt = utils.load_model(path)  # rebuilt from the record beside the file
    assert torch.equal(model(x), rebuilt.eval()(x))
    assert sorted(p.name for p in path.parent.iterdir()) == [
        "tiny.pth",
        "tiny.pth.json",
    ]


def test_the_course_names_tinyvggs_arguments():
    model = model_builder.TinyVGG(input_shape=1, hidden_units=5, output_shape=4)
    assert model(torch.randn(2, 1, 64, 64)).shape == (2, 4)


def test_the_course_train_script_trains_and_saves(image_folder, tmp_path, capsys):
    results = course_train.main(
        [
            "--train-dir", str(image_folder / "train"),
            "--test-dir", str(image_folder / "test"),
            "--epochs", "2", "--batch-size", "4", "--hidden-units", "4",
            "--model-dir", str(tmp_path / "models"),
        ]
    )  # fmt: skip
    assert len(results["test_acc"]) == 2
    model = TinyVGG(3, 4, 3)
    model.load_state_dict(torch.load(tmp_path / "models" / "tinyvgg.pth"))
    assert "Epoch: 2 | " in capsys.readouterr().out


def test_the_course_train_script_refuses_a_bad_number(image_folder):
    with pytest.raises(SystemExit):
        course_train.main(
            ["--train-dir", str(image_folder), "--test-dir", str(image_folder),
             "--epochs", "0"]
        )  # fmt: skip


def test_engine_train_refuses_a_missing_loader_and_bad_epochs():
    model, loader = TinyVGG(3, 4, 3, img_size=16), _tiny_loaders()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    with pytest.raises(ValueError, match="train_dataloader is None"):
        engine.train(model, None, loader, optimizer, loss_fn, 3, "cpu")
    for epochs in (0, -1, 1.5):
        with pytest.raises(ValueError, match="epochs must be a whole number"):
            engine.train(model, loader, loader, optimizer, loss_fn, epochs, "cpu")
    with pytest.raises(ValueError, match="device is None"):
        engine.train(model, loader, loader, optimizer, loss_fn, 1, None)


def test_train_step_refuses_an_optimiser_of_another_model():
    model, other = TinyVGG(3, 4, 3, img_size=16), TinyVGG(3, 4, 3, img_size=16)
    with pytest.raises(ValueError, match="holds none of this model's parameters"):
        engine.train_step(
            model,
            _tiny_loaders(),
            torch.nn.CrossEntropyLoss(),
            torch.optim.SGD(other.parameters(), lr=0.1),
            "cpu",
        )


def test_save_model_refuses_what_is_not_a_model_or_a_file_name(tmp_path):
    with pytest.raises(TypeError, match="torch.nn.Module, got NoneType"):
        utils.save_model(None, tmp_path, "m.pth")
    with pytest.raises(ValueError, match="should be a file name"):
        utils.save_model(TinyVGG(), tmp_path / "models", "../escape.pth")
    assert not (tmp_path / "escape.pth").exists()


def test_a_saved_model_file_gets_the_usual_permissions(tmp_path):
    path = utils.save_model(TinyVGG(), tmp_path, "m.pth")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask


def test_load_model_says_what_a_file_is_not(tmp_path):
    picture = tmp_path / "cat.jpg"
    Image.fromarray(photos.chelsea()).save(picture)
    with pytest.raises(ValueError, match="is not a model file saved by save_model"):
        utils.load_model(picture)
    wrapped = tmp_path / "run_model.pth"
    torch.save({"model": TinyVGG().state_dict(), "build_config": {}}, wrapped)
    with pytest.raises(ValueError, match="vitbook.training.model_files.load_model"):
        utils.load_model(wrapped)
    with pytest.raises(FileNotFoundError, match="No model file"):
        utils.load_model(tmp_path / "missing.pth")


def test_predictions_name_the_image_size_and_a_missing_gpu(image_folder):
    image_path = next((image_folder / "test" / "rocket").glob("*.jpg"))
    small = TinyVGG(3, 4, 3, img_size=32)
    with pytest.raises(
        RuntimeError, match=r"tensor of shape \(3, 64, 64\).*image_size"
    ):
        pred_and_plot_image(small, ["a", "b", "c"], image_path, (64, 64))
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="there is no CUDA GPU"):
            pred_and_plot_image(small, ["a", "b", "c"], image_path, device="cuda")
    plt.close("all")


def test_the_course_script_refuses_a_model_dir_that_is_a_file_before_training(
    image_folder, tmp_path, capsys
):
    taken = tmp_path / "afile"
    taken.write_text("mine")
    with pytest.raises(SystemExit) as stop:
        course_train.main(
            ["--train-dir", str(image_folder / "train"),
             "--test-dir", str(image_folder / "test"), "--model-dir", str(taken)]
        )  # fmt: skip
    printed = capsys.readouterr()
    assert stop.value.code == 2 and "Epoch" not in printed.out
    assert f"--model-dir {taken} is a file: give a folder" in printed.err
    assert taken.read_text() == "mine"


def test_the_course_script_names_a_missing_folder_in_one_line(image_folder, capsys):
    with pytest.raises(SystemExit) as stop:
        course_train.main(
            ["--train-dir", "nope/train", "--test-dir", str(image_folder / "test")]
        )
    assert stop.value.code == 2
    assert "The training folder nope/train does not exist" in capsys.readouterr().err


# Issue 53, probes53: mistakes that were silently wrong or raised a stranger's error.


def _truncated_png(path):
    """A PNG cut in half: it opens, but its pixels cannot be read."""
    Image.fromarray(photos.chelsea()[:64, :64]).save(path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_create_dataloaders_refuses_the_datasets_root_as_train_and_test(image_folder):
    transform = transforms.ToTensor()
    with pytest.raises(ValueError, match="same folder"):
        data_setup.create_dataloaders(image_folder, image_folder, transform, 4)
    with pytest.raises(ValueError, match="looks like the dataset's root") as refused:
        data_setup.create_dataloaders(image_folder, image_folder / "test", transform, 4)
    assert f"Pass {image_folder / 'train'} and {image_folder / 'test'}" in str(
        refused.value
    )


def test_create_dataloaders_says_a_file_is_a_file(image_folder):
    afile = next((image_folder / "train" / "cat").glob("*.jpg"))
    with pytest.raises(NotADirectoryError, match=f"folder {afile} is a file"):
        data_setup.create_dataloaders(
            afile, image_folder / "test", transforms.ToTensor(), 4
        )


def test_create_dataloaders_refuses_a_transform_that_is_not_callable(image_folder):
    with pytest.raises(TypeError, match="transform must turn an image into a tensor"):
        data_setup.create_dataloaders(
            image_folder / "train", image_folder / "test", "resize", 4
        )


def test_create_dataloaders_names_an_image_that_cannot_be_read(image_folder, tmp_path):
    root = tmp_path / "data"
    shutil.copytree(image_folder, root)
    bad = root / "train" / "cat" / "cut.png"
    _truncated_png(bad)
    train_dataloader, _, _ = data_setup.create_dataloaders(
        root / "train", root / "test", transforms.ToTensor(), 4
    )
    with pytest.raises(OSError, match=f"Cannot read image {bad}: image file is trunc"):
        list(train_dataloader)


def _course_args(image_folder, model_dir, *extra):
    return [
        "--train-dir", str(image_folder / "train"),
        "--test-dir", str(image_folder / "test"),
        "--epochs", "1", "--batch-size", "6", "--hidden-units", "2",
        "--model-dir", str(model_dir), *extra,
    ]  # fmt: skip


def test_the_course_script_keeps_a_saved_model_unless_told_to_overwrite(
    image_folder, tmp_path, capsys
):
    assert "--overwrite" in course_train._parser().format_help()
    models = tmp_path / "models"
    course_train.main(_course_args(image_folder, models))
    saved = (models / "tinyvgg.pth").read_bytes()
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        course_train.main(_course_args(image_folder, models, "--seed", "3"))
    printed = capsys.readouterr()
    assert stop.value.code == 2 and "Epoch" not in printed.out
    assert f"{models / 'tinyvgg.pth'} already holds a trained model" in printed.err
    assert "another --model-dir, or --overwrite" in printed.err
    assert (models / "tinyvgg.pth").read_bytes() == saved
    course_train.main(_course_args(image_folder, models, "--seed", "3", "--overwrite"))
    assert (models / "tinyvgg.pth").read_bytes() != saved


def test_the_course_script_names_an_unreadable_image_before_training(
    image_folder, tmp_path, capsys
):
    root = tmp_path / "data"
    shutil.copytree(image_folder, root)
    bad = root / "test" / "rocket" / "cut.png"
    _truncated_png(bad)
    with pytest.raises(SystemExit) as stop:
        course_train.main(_course_args(root, tmp_path / "models"))
    printed = capsys.readouterr()
    assert stop.value.code == 2 and "Epoch" not in printed.out
    assert f"Cannot read image {bad}: image file is truncated" in printed.err
    assert not (tmp_path / "models" / "tinyvgg.pth").exists()


def test_engine_train_refuses_a_loss_class_and_swapped_arguments():
    model, loader = TinyVGG(3, 4, 3, img_size=16), _tiny_loaders()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    with pytest.raises(
        TypeError, match=r"pass an instance, e\.g\. nn\.CrossEntropyLos"
    ):
        engine.train(
            model, loader, loader, optimizer, torch.nn.CrossEntropyLoss, 1, "cpu"
        )
    with pytest.raises(
        TypeError, match="optimizer is a CrossEntropyLoss and loss_fn a SGD"
    ):
        engine.train(model, loader, loader, loss_fn, optimizer, 1, "cpu")
    with pytest.raises(TypeError, match="optimizer, loss_fn"):
        engine.train_step(model, loader, optimizer, loss_fn, "cpu")


def test_engine_train_warns_once_when_the_training_loss_is_not_finite(capsys):
    model, loader = TinyVGG(3, 4, 3, img_size=16), _tiny_loaders()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def nan_loss(logits, y):
        return torch.nn.functional.cross_entropy(logits, y) * math.nan

    quiet = {"epochs": 2, "device": "cpu", "verbose": False}
    engine.train(model, loader, None, optimizer, torch.nn.CrossEntropyLoss(), **quiet)
    assert capsys.readouterr().err == ""  # finite: nothing said
    results = engine.train(model, loader, None, optimizer, nan_loss, **quiet)
    assert all(math.isnan(loss) for loss in results["train_loss"])  # training went on
    warnings = capsys.readouterr().err.strip().splitlines()
    assert warnings == [
        "Warning: the training loss of epoch 1 is nan: the learning rate may be too "
        "high (try 10 times lower)."
    ]


def test_save_model_says_a_target_dir_that_is_a_file(tmp_path):
    taken = tmp_path / "afile"
    taken.write_text("mine")
    with pytest.raises(NotADirectoryError, match=f"target_dir {taken} is a file"):
        utils.save_model(TinyVGG(), taken, "m.pth")
    assert taken.read_text() == "mine"


def test_load_model_names_a_damaged_json_beside_the_model(tmp_path):
    model = model_builder.build_model("tinyvgg", num_classes=3, img_size=16)
    path = utils.save_model(model, tmp_path, "m.pth")
    about = tmp_path / "m.pth.json"
    about.write_text("{bad json")
    with pytest.raises(ValueError, match=f"{about} is damaged"):
        utils.load_model(path)
