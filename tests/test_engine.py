"""The training engine: fit() with a Recipe learns, honours every recipe field, weighs
accuracy per sample, takes soft targets, calls back, stops on time and on divergence."""

from __future__ import annotations

import functools
import itertools
import math
import time

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torchvision import transforms
from torchvision.transforms import v2

from going_modular import engine, utils
from going_modular.data.augment import MixUpCutMix
from going_modular.models import build_model
from vitbook.data import datasets
from vitbook.training import divergence, loop
from vitbook.training.checkpoint import read_checkpoint
from vitbook.training.loop import RESULT_KEYS, evaluate, fit
from vitbook.training.recipe import Recipe, learning_rates


def test_fit_reaches_90_percent_on_digits():
    """The quick budget: TinyVGG, 4 epochs of the 1,437 training digits, on a CPU."""
    utils.set_seeds(0)
    to_tensor = transforms.ToTensor()
    train_dl = DataLoader(
        datasets.get_mnist(True, to_tensor), batch_size=32, shuffle=True
    )
    test_dl = DataLoader(datasets.get_mnist(False, to_tensor), batch_size=128)
    model = build_model("tinyvgg", num_classes=10, img_size=28, in_channels=1)
    recipe = Recipe(optimizer=torch.optim.Adam, lr=3e-3, epochs=4)
    results = fit(model, train_dl, test_dl, recipe, device="cpu", progress=False)
    assert set(results) == set(RESULT_KEYS)
    assert all(len(v) == 4 for v in results.values())
    assert results["steps"] == [len(train_dl)] * 4
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
    loss, acc = evaluate(_Fixed(), loader, loss_fn, "cpu", progress=False)
    assert acc == pytest.approx(4 / 5)
    assert loss == pytest.approx(loss_fn(_Fixed()(x), y).item())


def _toy_problem(n=64):
    torch.manual_seed(0)
    x = torch.randn(n, 3, 8, 8)
    y = (x.mean(dim=(1, 2, 3)) > 0).long()
    return DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)


def _linear():
    return nn.Sequential(nn.Flatten(), nn.Linear(192, 2))


def _fit(model, loader=None, test=None, **recipe):
    loader = loader if loader is not None else _toy_problem()
    test = loader if test is None else test
    return fit(model, loader, test, Recipe(**recipe), progress=False)


# The recipe's parts, built as fit builds them.


def test_the_optimiser_is_the_recipes_with_its_learning_rate():
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 2))
    assert type(Recipe().build_optimizer(model)) is torch.optim.AdamW
    adam = Recipe(optimizer=torch.optim.Adam, lr=3e-3).build_optimizer(model)
    assert type(adam) is torch.optim.Adam and adam.param_groups[0]["lr"] == 3e-3
    sgd = Recipe(optimizer=functools.partial(torch.optim.SGD, momentum=0.9))
    assert sgd.build_optimizer(model).param_groups[0]["momentum"] == 0.9


def test_weight_decay_spares_biases_and_norms_unless_told_otherwise():
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 2))
    model[0].bias.requires_grad_(False)  # frozen: left out
    decay, spared = Recipe(weight_decay=0.05).build_optimizer(model).param_groups
    assert decay["weight_decay"] == 0.05 and spared["weight_decay"] == 0.0
    assert [p.shape for p in decay["params"]] == [(8, 4), (2, 8)]
    assert len(spared["params"]) == 3  # LayerNorm weight and bias, the last bias
    (every,) = (
        Recipe(weight_decay=0.3, exempt_1d_params=False)
        .build_optimizer(model)
        .param_groups
    )
    assert every["weight_decay"] == 0.3 and len(every["params"]) == 5
    (plain,) = Recipe().build_optimizer(model).param_groups  # no decay: one group
    assert plain["weight_decay"] == 0.0 and len(plain["params"]) == 5


def test_a_fused_optimiser_only_when_asked_and_accepted():
    model = nn.Linear(4, 2)
    assert Recipe().build_optimizer(model, fused=True).defaults["fused"]
    assert not Recipe().build_optimizer(model).defaults["fused"]
    not_fusable = Recipe(optimizer=torch.optim.RMSprop)  # has no fused kernel
    assert type(not_fusable.build_optimizer(model, fused=True)) is torch.optim.RMSprop


def test_warmup_cosine_schedule_values_per_step():
    recipe = Recipe(lr=2.0, schedule="warmup_cosine", warmup_steps=4)
    lrs = learning_rates(recipe, 12)
    assert lrs[:5] == pytest.approx([0.5, 1.0, 1.5, 2.0, 2.0])
    assert lrs[8] == pytest.approx(1.0)  # half-way down the cosine
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:])) and lrs[-1] < 0.1
    assert learning_rates(Recipe(lr=2.0), 5) == [2.0] * 5  # constant


def test_fit_steps_the_schedule_once_per_step_over_the_runs_length():
    totals = []

    def schedule(optimizer, total_steps):
        totals.append(total_steps)
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5**step)

    model = _linear()
    _fit(model, epochs=3, max_steps_per_epoch=3, schedule=schedule, lr=0.1)
    assert totals == [9]  # 3 epochs of min(4 batches, 3 steps)
    assert _fit(_linear(), steps=6, schedule=schedule)["steps"] == [4, 2]
    assert totals[-1] == 6


def test_losses_smooth_the_training_loss_only():
    loss_fn, test_loss_fn = Recipe(label_smoothing=0.1).build_losses()
    assert loss_fn.label_smoothing == 0.1 and test_loss_fn.label_smoothing == 0.0
    mse = nn.MSELoss()
    assert Recipe(loss_fn=mse).build_losses() == (mse, mse)
    # in a run (weights all but frozen): smoothed training loss, plain test loss
    torch.manual_seed(0)
    x, y = torch.randn(32, 3, 8, 8), torch.randint(0, 2, (32,))
    model = _linear()
    with torch.no_grad():
        expected = [
            nn.CrossEntropyLoss(label_smoothing=s)(model(x), y) for s in (0.5, 0)
        ]
    loader = DataLoader(TensorDataset(x, y), batch_size=8)
    results = _fit(model, loader, label_smoothing=0.5, lr=1e-12)
    assert results["train_loss"][0] == pytest.approx(expected[0].item(), rel=1e-5)
    assert results["test_loss"][0] == pytest.approx(expected[1].item(), rel=1e-5)
    assert expected[0] != pytest.approx(expected[1])


def test_the_batch_transform_sees_every_training_batch_and_gives_soft_targets():
    mix = v2.MixUp(num_classes=2)
    calls = []

    def mixing(X, y):
        calls.append(len(X))
        return mix(X, y)

    results = _fit(_linear(), batch_transform=mixing, epochs=2, max_grad_norm=1.0)
    assert calls == [16] * 8
    assert all(0 <= a <= 1 for a in results["train_acc"])


def test_steps_make_epochs_of_at_most_max_steps_and_cut_the_last():
    results = _fit(_linear(), steps=10, max_steps_per_epoch=3)
    assert results["steps"] == [3, 3, 3, 1]
    assert _fit(_linear(), steps=6)["steps"] == [4, 2]  # epochs of the loader's 4
    assert _fit(_linear(), epochs=2, max_steps_per_epoch=2)["steps"] == [2, 2]


def test_max_eval_steps_caps_each_test_pass():
    model, tested = _linear(), []
    model.register_forward_hook(lambda m, *_: None if m.training else tested.append(1))
    x = torch.randn(80, 3, 8, 8)
    y = (x.mean(dim=(1, 2, 3)) > 0).long()
    test = DataLoader(TensorDataset(x, y), batch_size=16)  # 5 batches
    results = _fit(model, test=test, epochs=2, max_eval_steps=2)
    assert len(tested) == 4 and results["steps"] == [4, 4]  # training is not capped
    with torch.inference_mode():  # the last test pass: the first 2 batches, 32 images
        expected = nn.CrossEntropyLoss()(model(x[:32]), y[:32]).item()
    assert results["test_loss"][-1] == pytest.approx(expected, rel=1e-5)


def test_gradient_clipping_bounds_the_update():
    loader = DataLoader(
        TensorDataset(torch.full((4, 1), 100.0), torch.tensor([0, 0, 0, 0])),
        batch_size=4,
    )
    model = nn.Linear(1, 2)
    before = [p.detach().clone() for p in model.parameters()]
    _fit(model, loader, lr=1.0, optimizer=torch.optim.SGD, max_grad_norm=0.5)
    step = torch.cat(
        [(p.detach() - b).flatten() for p, b in zip(model.parameters(), before)]
    )
    assert step.norm().item() == pytest.approx(0.5, rel=1e-4)


def test_amp_trains_and_tests_under_bfloat16_autocast_on_a_cpu():
    model = _linear()
    dtypes = set()
    model.register_forward_hook(lambda m, i, out: dtypes.add(out.dtype))
    results = _fit(model, amp=True, epochs=2, lr=0.1)
    assert dtypes == {torch.bfloat16}
    assert all(math.isfinite(v) for v in results["train_loss"])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"epochs": 0}, "epochs must be a positive integer"),
        ({"epochs": 2.5}, "epochs must be a positive integer"),
        ({"steps": 0}, "steps must be a positive integer"),
        ({"epochs": 2, "steps": 5}, "epochs or as steps, not both"),
        ({"lr": 0.0}, "lr must be a positive number"),
        ({"weight_decay": -0.1}, "weight_decay must be a number >= 0"),
        (
            {"label_smoothing": 1.0},
            r"label_smoothing must be a finite number in \[0, 1\)",
        ),
        ({"label_smoothing": 0.1, "loss_fn": nn.MSELoss()}, "your own loss_fn"),
        ({"schedule": "cosine"}, "Unknown schedule 'cosine'"),
        ({"warmup_steps": 10}, "needs schedule='warmup_cosine'"),
        ({"time_budget": 0}, "time_budget must be a positive"),
        ({"max_grad_norm": -1.0}, "max_grad_norm must be a positive"),
        ({"max_steps_per_epoch": 0}, "max_steps_per_epoch must be a positive"),
    ],
)
def test_recipes_refuse_nonsense_naming_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        Recipe(**fields)


def test_replace_gives_a_changed_copy():
    recipe = Recipe(lr=0.1)
    assert recipe.replace(amp=True) == Recipe(lr=0.1, amp=True) and not recipe.amp


def test_a_warmup_cosine_run_needs_a_length():
    batches = ((torch.randn(2, 3, 8, 8), torch.tensor([0, 1])) for _ in range(3))
    with pytest.raises(ValueError, match="needs the run's number of steps"):
        fit(_linear(), batches, None, Recipe(schedule="warmup_cosine"), device="cpu")


# One epoch, the loop fit runs.


def test_train_step_steps_the_scheduler_after_every_optimizer_step():
    model = _linear()
    calls = []
    model.register_forward_hook(lambda *args: calls.append(1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    two_batches = itertools.islice(_toy_problem(), 2)
    loss, acc = engine.train_step(
        model, two_batches, nn.CrossEntropyLoss(), optimizer, "cpu", scheduler=scheduler
    )
    assert len(calls) == 2 and scheduler.last_epoch == 2
    assert loss > 0 and 0 <= acc <= 1


def test_empty_dataloader_is_explained():
    with pytest.raises(ValueError, match="no batches"):
        evaluate(nn.Linear(1, 2), [], nn.CrossEntropyLoss(), "cpu", progress=False)


# Callbacks, data checks, devices.


def test_callbacks_see_every_completed_epoch_and_one_can_stop_the_run():
    seen = []
    results = fit(
        _linear(),
        _toy_problem(),
        _toy_problem(),
        Recipe(epochs=5, lr=0.1),
        device="cpu",
        callbacks=[
            lambda epoch, results: seen.append((epoch, len(results["test_acc"]))),
            lambda epoch, results: epoch == 2,  # early stopping
        ],
        progress=False,
    )
    assert seen == [(1, 1), (2, 2)] and len(results["train_loss"]) == 2


def test_without_test_data_only_training_is_recorded():
    results = fit(_linear(), _toy_problem(), None, Recipe(epochs=2), progress=False)
    assert set(results) == {k for k in RESULT_KEYS if not k.startswith("test")}
    assert len(results["train_loss"]) == 2


def test_the_device_defaults_to_the_gpu_when_there_is_one(monkeypatch):
    monkeypatch.setattr(loop, "get_device", lambda: torch.device("cpu"))
    model = _linear()
    fit(model, _toy_problem(), None, Recipe(), progress=False)
    assert next(model.parameters()).device.type == "cpu"


def _counting_model():
    model = _linear()
    calls = []
    model.register_forward_hook(lambda *args: calls.append(1))
    return model, calls


def test_empty_test_loader_is_refused_before_training():
    model, calls = _counting_model()
    empty = DataLoader(TensorDataset(torch.empty(0, 3, 8, 8), torch.empty(0)))
    with pytest.raises(ValueError, match="test dataloader has no batches"):
        _fit(model, _toy_problem(), empty)
    assert calls == []  # not a single training step ran


def test_drop_last_leaving_no_batch_says_so():
    model, calls = _counting_model()
    x, y = torch.randn(5, 3, 8, 8), torch.zeros(5, dtype=torch.long)
    loader = DataLoader(TensorDataset(x, y), batch_size=8, drop_last=True)
    with pytest.raises(ValueError) as info:
        _fit(model, loader, _toy_problem())
    message = str(info.value)
    assert "training dataloader has 0 batches" in message
    assert "5 samples are fewer than batch_size=8 and drop_last=True" in message
    assert "empty" not in message
    assert calls == []


def test_a_batch_of_one_image_is_skipped_for_a_batchnorm_model():
    x = torch.randn(9, 4)
    loader = DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=4)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))
    trained = []

    def record(module, inputs, output):
        if module.training:
            trained.append(len(output))

    model.register_forward_hook(record)
    results = _fit(model, loader, lr=0.1, optimizer=torch.optim.SGD)
    assert trained == [4, 4]  # BatchNorm cannot train on the last batch's one image
    assert results["steps"] == [2] and results["test_acc"][0] >= 0  # tests all 9
    alone = DataLoader(TensorDataset(x[:1], torch.zeros(1, dtype=torch.long)))
    with pytest.raises(ValueError, match="skips batches of a single image"):
        _fit(model, alone, lr=0.1, optimizer=torch.optim.SGD)


# Divergence: NaN, infinity, explosion.


def _linear_problem(x, y, batch_size=4):
    return DataLoader(TensorDataset(x, y), batch_size=batch_size)


def test_nan_pixel_stops_at_its_step_and_leaves_the_weights_finite():
    x = torch.randn(12, 3)
    x[9, 1] = float("nan")  # in the third batch of four
    loader = _linear_problem(x, torch.zeros(12, dtype=torch.long))
    model = nn.Linear(3, 2)
    with pytest.raises(divergence.NonFiniteLossError) as info:
        _fit(model, loader, epochs=2, lr=0.1, optimizer=torch.optim.SGD)
    message = str(info.value)
    assert "epoch 1, step 3" in message
    assert "1 NaN/infinite value(s) in this batch's inputs" in message
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert info.value.epoch == 1 and info.value.results["train_loss"] == []


def test_huge_learning_rate_is_named_as_the_likely_cause():
    with pytest.raises(divergence.NonFiniteLossError, match="epoch 1, step 2") as info:
        _fit(_linear(), lr=1e38, optimizer=torch.optim.SGD)
    assert "learning rate too high (now 1e+38)" in str(info.value)
    assert "inputs of this batch are finite" in str(info.value)


def test_non_finite_test_loss_is_an_error_not_a_result():
    train_dl = _linear_problem(torch.randn(8, 3), torch.zeros(8, dtype=torch.long))
    x = torch.randn(8, 3)
    x[0, 0] = float("inf")
    test_dl = _linear_problem(x, torch.zeros(8, dtype=torch.long))
    with pytest.raises(
        divergence.NonFiniteLossError, match="test loss is nan after epoch 1"
    ):
        _fit(nn.Linear(3, 2), train_dl, test_dl, lr=0.1)


def test_a_finite_loss_explosion_stops_training_before_it_is_recorded(tmp_path):
    # Each SGD step maps w to -2w, so the loss (w x)^2 grows 4x per step but stays finite.
    loader = DataLoader(TensorDataset(torch.ones(40, 1), torch.zeros(40, 1)), 4)
    model = nn.Linear(1, 1, bias=False)
    nn.init.ones_(model.weight)
    seen = []
    recipe = Recipe(optimizer=torch.optim.SGD, lr=1.5, loss_fn=nn.MSELoss(), epochs=2)
    with pytest.raises(divergence.LossExplodedError) as info:
        fit(
            model,
            loader,
            loader,
            recipe,
            device="cpu",
            callbacks=[lambda epoch, results: seen.append(epoch)],
            checkpoint_dir=tmp_path,
            progress=False,
        )
    message = str(info.value)
    assert "The training loss of epoch 1 is 3.5e+04, more than 1000 times" in message
    assert (
        "the first step's loss (1)" in message and "learning rate too high" in message
    )
    assert seen == [] and read_checkpoint(tmp_path) is None
    assert isinstance(info.value, divergence.TrainingDiverged)


def test_a_weight_decay_that_blows_up_the_weights_is_named():
    with pytest.raises(divergence.NonFiniteLossError) as info:
        _fit(_linear(), lr=1e-3, weight_decay=1e30, exempt_1d_params=False)
    assert "a weight decay too high (1e+30: learning rate x weight decay" in str(
        info.value
    )


# The check on a GPU, run on the CPU by declaring it a device that syncs.


def _nan_in_step_3(n=20):
    x = torch.randn(n, 3)
    x[9, 1] = float("nan")  # in the third batch
    return _linear_problem(x, torch.zeros(n, dtype=torch.long))


def test_on_a_gpu_the_nan_check_reads_a_device_flag_and_the_scaler_skips_the_step(
    monkeypatch,
):
    """fit builds a fused optimiser there; no value is read at each step: the flag is
    read at the epoch's end (every NONFINITE_CHECK_STEPS steps), the scaler has skipped
    the NaN step meanwhile on the device."""
    monkeypatch.setattr(loop, "_ASYNC_DEVICES", ("cuda", "cpu"))
    batches = list(_nan_in_step_3())  # a list: no DataLoader reading its seed
    reads = []
    item = torch.Tensor.item
    monkeypatch.setattr(torch.Tensor, "item", lambda t: reads.append(1) or item(t))
    model = nn.Linear(3, 2)
    steps = []
    model.register_forward_hook(lambda *args: steps.append(1))
    with pytest.raises(
        divergence.NonFiniteLossError, match="NaN or infinite at epoch 1, step 3"
    ):
        _fit(model, batches, epochs=2, lr=0.1)
    assert len(steps) == 5 and reads == []  # no sync at step 3: read after step 5
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_on_a_gpu_an_optimiser_that_cannot_skip_is_checked_at_every_step(
    monkeypatch,
):
    monkeypatch.setattr(loop, "_ASYNC_DEVICES", ("cuda", "cpu"))
    model = nn.Linear(3, 2)
    steps = []
    model.register_forward_hook(lambda *args: steps.append(1))
    with pytest.raises(divergence.NonFiniteLossError, match="epoch 1, step 3"):
        _fit(model, _nan_in_step_3(), lr=0.1, optimizer=torch.optim.RMSprop)
    assert len(steps) == 3
    assert all(torch.isfinite(p).all() for p in model.parameters())


# The time budget, and a CCT trained with a CCT recipe.


def _tiny_loader(n: int = 32, batch_size: int = 16) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=batch_size)


class _Slow(nn.Module):
    """A linear classifier that takes ``delay`` seconds per training forward pass."""

    def __init__(self, delay: float):
        super().__init__()
        self.delay, self.fc, self.calls = delay, nn.Linear(3 * 32 * 32, 10), 0

    def forward(self, x):
        if self.training:
            self.calls += 1
            time.sleep(self.delay)
        return self.fc(x.flatten(1))


def test_time_budget_stops_mid_epoch_and_tests_that_epoch():
    model = _Slow(0.05)
    loader = _tiny_loader(n=320)  # 20 batches: 1 s per epoch
    results = _fit(model, loader, epochs=3, time_budget=0.2, lr=0.01)
    assert all(len(v) == 1 for v in results.values())
    assert 1 <= model.calls < 20  # stopped inside the first epoch (20 batches)
    assert results["steps"] == [model.calls]


def test_time_budget_large_enough_changes_nothing():
    model = _Slow(0.0)
    results = _fit(model, _tiny_loader(), epochs=2, time_budget=60, lr=0.01)
    assert all(len(v) == 2 for v in results.values()) and model.calls == 4


def test_fit_trains_a_cct_on_mixed_batches():
    torch.manual_seed(0)
    model = build_model("cct_2_3x2", num_classes=10, img_size=32)
    loader = _tiny_loader()
    mix = MixUpCutMix(10, label_smoothing=0.1)
    recipe = Recipe(
        lr=5.5e-4,
        weight_decay=6e-2,
        schedule="warmup_cosine",
        warmup_steps=1,
        batch_transform=mix,
        epochs=2,
    )
    before = [p.detach().clone() for p in model.parameters()]
    results = fit(model, loader, loader, recipe, device="cpu", progress=False)
    losses = results["train_loss"] + results["test_loss"]
    assert all(math.isfinite(v) and 0 < v < 10 for v in losses)
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
    assert results["steps"] == [2, 2] and mix.steps == 4
