"""The training engine: it learns, it weighs accuracy per sample, it takes soft targets."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torchvision import transforms
from torchvision.transforms import v2

from going_modular import datasets, engine, utils
from going_modular.models import build_model
from going_modular.optim import warmup_cosine_schedule


def test_engine_reaches_90_percent_on_digits():
    """The quick budget: TinyVGG, 4 epochs of the 1,437 training digits, on a CPU."""
    utils.set_seeds(0)
    to_tensor = transforms.ToTensor()
    train_dl = DataLoader(
        datasets.get_mnist(True, to_tensor), batch_size=32, shuffle=True
    )
    test_dl = DataLoader(datasets.get_mnist(False, to_tensor), batch_size=128)
    model = build_model("tinyvgg", num_classes=10, img_size=28, in_channels=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    results = engine.train(
        model,
        train_dl,
        test_dl,
        optimizer,
        nn.CrossEntropyLoss(),
        4,
        "cpu",
        progress=False,
    )
    assert set(results) == {
        "train_loss",
        "train_acc",
        "test_loss",
        "test_acc",
        "epoch_seconds",
    }
    assert all(len(v) == 4 for v in results.values())
    assert results["test_acc"][-1] >= 0.90
    assert results["train_loss"][-1] < results["train_loss"][0]


class _Fixed(nn.Module):
    """Predicts class 0 for inputs < 0.5 and class 1 otherwise; no parameters to learn."""

    def forward(self, x):
        return torch.cat([0.5 - x, x - 0.5], dim=1)


def test_accuracy_is_weighted_per_sample_not_per_batch():
    # 5 samples, batch size 4: batches [4 right] and [1 wrong]. Per sample: 4/5; per batch: 1/2.
    x = torch.tensor([[0.1], [0.9], [0.2], [0.8], [0.3]])
    y = torch.tensor([0, 1, 0, 1, 1])
    loader = DataLoader(TensorDataset(x, y), batch_size=4)
    loss_fn = nn.CrossEntropyLoss()
    loss, acc = engine.test_step(_Fixed(), loader, loss_fn, "cpu", progress=False)
    assert acc == pytest.approx(4 / 5)
    assert loss == pytest.approx(loss_fn(_Fixed()(x), y).item())


def _toy_problem(n=64):
    torch.manual_seed(0)
    x = torch.randn(n, 3, 8, 8)
    y = (x.mean(dim=(1, 2, 3)) > 0).long()
    return DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)


def test_soft_targets_from_mixup_and_a_per_step_scheduler():
    loader = _toy_problem()
    model = nn.Sequential(nn.Flatten(), nn.Linear(192, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = warmup_cosine_schedule(optimizer, warmup_steps=2, total_steps=8)
    mix = v2.MixUp(num_classes=2)
    loss, acc = engine.train_step(
        model,
        loader,
        nn.CrossEntropyLoss(),
        optimizer,
        "cpu",
        scheduler=scheduler,
        batch_transform=mix,
        max_grad_norm=1.0,
        progress=False,
    )
    assert 0.0 <= acc <= 1.0 and loss > 0
    assert (
        scheduler.last_epoch == 4
    )  # one scheduler step per optimizer step (4 batches)


def test_max_steps_caps_an_epoch():
    loader = _toy_problem()
    model = nn.Sequential(nn.Flatten(), nn.Linear(192, 2))
    calls = []
    model.register_forward_hook(lambda *args: calls.append(1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    engine.train_step(
        model,
        loader,
        nn.CrossEntropyLoss(),
        optimizer,
        "cpu",
        max_steps=2,
        progress=False,
    )
    assert len(calls) == 2


def test_gradient_clipping_bounds_the_update():
    loader = DataLoader(
        TensorDataset(torch.full((4, 1), 100.0), torch.tensor([0, 0, 0, 0])),
        batch_size=4,
    )
    model = nn.Linear(1, 2)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    engine.train_step(
        model,
        loader,
        nn.CrossEntropyLoss(),
        optimizer,
        "cpu",
        max_grad_norm=0.5,
        progress=False,
    )
    step = torch.cat(
        [(p.detach() - b).flatten() for p, b in zip(model.parameters(), before)]
    )
    assert step.norm().item() == pytest.approx(0.5, rel=1e-4)


def test_bf16_autocast_on_cpu_trains():
    loader = _toy_problem()
    model = nn.Sequential(nn.Flatten(), nn.Linear(192, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    results = engine.train(
        model,
        loader,
        loader,
        optimizer,
        nn.CrossEntropyLoss(),
        2,
        "cpu",
        amp=True,
        progress=False,
    )
    assert all(torch.isfinite(torch.tensor(results["train_loss"])))


def test_non_positive_epochs():
    with pytest.raises(ValueError, match="epochs must be a positive integer"):
        engine.train(nn.Linear(1, 1), [], [], None, nn.MSELoss(), 0, "cpu")


def test_empty_dataloader_is_explained():
    with pytest.raises(ValueError, match="no batches"):
        engine.test_step(
            nn.Linear(1, 2), [], nn.CrossEntropyLoss(), "cpu", progress=False
        )


def _linear_problem(x, y, batch_size=4):
    return DataLoader(TensorDataset(x, y), batch_size=batch_size)


def test_nan_pixel_stops_at_its_step_and_leaves_the_weights_finite():
    x = torch.randn(12, 3)
    x[9, 1] = float("nan")  # in the third batch of four
    loader = _linear_problem(x, torch.zeros(12, dtype=torch.long))
    model = nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(engine.NonFiniteLossError) as info:
        engine.train(
            model,
            loader,
            loader,
            optimizer,
            nn.CrossEntropyLoss(),
            2,
            "cpu",
            progress=False,
        )
    message = str(info.value)
    assert "epoch 1, step 3" in message
    assert "1 NaN/infinite value(s) in this batch's inputs" in message
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_huge_learning_rate_is_named_as_the_likely_cause():
    loader = _toy_problem()
    model = nn.Sequential(nn.Flatten(), nn.Linear(192, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=float("inf"))
    with pytest.raises(engine.NonFiniteLossError, match="epoch 1, step 2") as info:
        engine.train(
            model,
            loader,
            loader,
            optimizer,
            nn.CrossEntropyLoss(),
            1,
            "cpu",
            progress=False,
        )
    assert "learning rate too high (now inf)" in str(info.value)
    assert "inputs of this batch are finite" in str(info.value)


def test_non_finite_test_loss_is_an_error_not_a_result():
    train_dl = _linear_problem(torch.randn(8, 3), torch.zeros(8, dtype=torch.long))
    x = torch.randn(8, 3)
    x[0, 0] = float("inf")
    test_dl = _linear_problem(x, torch.zeros(8, dtype=torch.long))
    model = nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(
        engine.NonFiniteLossError, match="test loss is nan after epoch 1"
    ):
        engine.train(
            model,
            train_dl,
            test_dl,
            optimizer,
            nn.CrossEntropyLoss(),
            1,
            "cpu",
            progress=False,
        )


def _counting_model():
    model = nn.Sequential(nn.Flatten(), nn.Linear(192, 2))
    calls = []
    model.register_forward_hook(lambda *args: calls.append(1))
    return model, calls


def test_empty_test_loader_is_refused_before_training():
    model, calls = _counting_model()
    empty = DataLoader(TensorDataset(torch.empty(0, 3, 8, 8), torch.empty(0)))
    with pytest.raises(ValueError, match="test dataloader has no batches"):
        engine.train(
            model,
            _toy_problem(),
            empty,
            torch.optim.SGD(model.parameters(), lr=0.1),
            nn.CrossEntropyLoss(),
            1,
            "cpu",
            progress=False,
        )
    assert calls == []  # not a single training step ran


def test_drop_last_leaving_no_batch_says_so():
    model, calls = _counting_model()
    x, y = torch.randn(5, 3, 8, 8), torch.zeros(5, dtype=torch.long)
    loader = DataLoader(TensorDataset(x, y), batch_size=8, drop_last=True)
    with pytest.raises(ValueError) as info:
        engine.train(
            model,
            loader,
            _toy_problem(),
            torch.optim.SGD(model.parameters(), lr=0.1),
            nn.CrossEntropyLoss(),
            1,
            "cpu",
            progress=False,
        )
    message = str(info.value)
    assert "training dataloader has 0 batches" in message
    assert "5 samples are fewer than batch_size=8 and drop_last=True" in message
    assert "empty" not in message
    assert calls == []


def test_on_epoch_end_sees_every_completed_epoch():
    loader = _toy_problem()
    model = nn.Sequential(nn.Flatten(), nn.Linear(192, 2))
    seen = []
    engine.train(
        model,
        loader,
        loader,
        torch.optim.SGD(model.parameters(), lr=0.1),
        nn.CrossEntropyLoss(),
        3,
        "cpu",
        progress=False,
        on_epoch_end=lambda epoch, results: seen.append(
            (epoch, len(results["test_acc"]))
        ),
    )
    assert seen == [(1, 1), (2, 2), (3, 3)]


def test_a_finite_loss_explosion_stops_training_before_it_is_recorded(tmp_path):
    # Each SGD step maps w to -2w, so the loss (w x)^2 grows 4x per step but stays finite.
    loader = DataLoader(TensorDataset(torch.ones(40, 1), torch.zeros(40, 1)), 4)
    model = nn.Linear(1, 1, bias=False)
    nn.init.ones_(model.weight)
    seen = []
    with pytest.raises(engine.LossExplodedError) as info:
        engine.train(
            model,
            loader,
            loader,
            torch.optim.SGD(model.parameters(), lr=1.5),
            nn.MSELoss(),
            2,
            "cpu",
            progress=False,
            on_epoch_end=lambda epoch, results: seen.append(epoch),
            checkpoint_dir=tmp_path,
        )
    message = str(info.value)
    assert "The training loss of epoch 1 is 3.5e+04, more than 1000 times" in message
    assert (
        "the first step's loss (1)" in message and "learning rate too high" in message
    )
    assert seen == [] and engine.read_checkpoint(tmp_path) is None
    assert isinstance(info.value, engine.TrainingDiverged)


def test_a_batch_of_one_image_is_skipped_for_a_batchnorm_model():
    x = torch.randn(9, 4)
    loader = DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=4)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))
    trained = []

    def record(module, inputs, output):
        if module.training:
            trained.append(len(output))

    model.register_forward_hook(record)
    results = engine.train(
        model,
        loader,
        loader,
        torch.optim.SGD(model.parameters(), lr=0.1),
        nn.CrossEntropyLoss(),
        1,
        "cpu",
        progress=False,
    )
    assert trained == [4, 4]  # BatchNorm cannot train on the last batch's one image
    assert results["test_acc"][0] >= 0  # the test pass (eval mode) takes all 9
    alone = DataLoader(TensorDataset(x[:1], torch.zeros(1, dtype=torch.long)))
    with pytest.raises(ValueError, match="skips batches of a single image"):
        engine.train_step(
            model,
            alone,
            nn.CrossEntropyLoss(),
            torch.optim.SGD(model.parameters(), lr=0.1),
            "cpu",
            progress=False,
        )


def test_on_a_gpu_the_nan_check_reads_a_device_flag_and_skips_the_bad_step(
    monkeypatch,
):
    """The CUDA path, run on the CPU: the flag is read at the epoch's end (every
    NONFINITE_CHECK_STEPS steps), the scaler has skipped the NaN step meanwhile."""
    monkeypatch.setattr(engine, "_defer_loss_check", lambda device: True)
    x = torch.randn(20, 3)
    x[9, 1] = float("nan")  # in the third batch of five
    loader = _linear_problem(x, torch.zeros(20, dtype=torch.long))
    model = nn.Linear(3, 2)
    steps = []
    model.register_forward_hook(lambda *args: steps.append(1))
    with pytest.raises(
        engine.NonFiniteLossError, match="NaN or infinite at epoch 1, step 3"
    ):
        engine.train(
            model,
            loader,
            loader,
            torch.optim.SGD(model.parameters(), lr=0.1),
            nn.CrossEntropyLoss(),
            2,
            "cpu",
            progress=False,
        )
    assert len(steps) == 5  # no sync at step 3: the flag was read after step 5
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_a_weight_decay_that_blows_up_the_weights_is_named():
    loader = _toy_problem()
    model = nn.Sequential(nn.Flatten(), nn.Linear(192, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e30)
    with pytest.raises(engine.NonFiniteLossError) as info:
        engine.train(
            model, loader, loader, optimizer, nn.CrossEntropyLoss(), 1, "cpu",
            progress=False,
        )  # fmt: skip
    assert "a weight decay too high (1e+30: learning rate x weight decay" in str(
        info.value
    )
