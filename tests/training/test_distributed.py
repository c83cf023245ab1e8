"""Distributed data parallel on a CPU (gloo, 2 processes): the same steps as one process
with the whole batch, a resumed run equal to an uninterrupted one, every training image
once per epoch, every test sample counted once.

One spawn of two processes runs every scenario (starting processes is the slow part); each
rank saves what it saw, and the tests below read it.
"""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.multiprocessing as mp
from stateful_transform import Jitter
from torch import nn
from torch.utils.data import DataLoader, Dataset, Sampler

from vitbook.training import distributed
from vitbook.training.divergence import NonFiniteLossError
from vitbook.training.loop import evaluate, fit
from vitbook.training.recipe import Recipe

N_TRAIN, N_TEST, EPOCHS, SEED = 32, 13, 3, 7
BATCH = 8  # the global batch: 4 per process with 2 processes


class _Indexed(Dataset):
    """Fixed random images with labels; remembers which indices were read, in order."""

    def __init__(self, n: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 3, 4, 4, generator=g)
        self.y = torch.randint(0, 3, (n,), generator=g)
        self.read: list[int] = []

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        self.read.append(int(i))
        return self.x[i], self.y[i]


class _RecordedLoss(nn.CrossEntropyLoss):
    """Cross-entropy that keeps every training step's loss."""

    def __init__(self):
        super().__init__()
        self.values: list[float] = []

    def forward(self, logits, y):
        loss = super().forward(logits, y)
        self.values.append(loss.item())
        return loss


class _DistributedOrder(Sampler):
    """One process's order that matches two ranks' DistributedSampler(shuffle=True): epoch
    ``e`` is the permutation seeded by ``SEED + e``."""

    def __init__(self):
        self.epoch = 0

    def __len__(self) -> int:
        return N_TRAIN

    def __iter__(self):
        self.epoch += 1
        g = torch.Generator().manual_seed(SEED + self.epoch)
        return iter(torch.randperm(N_TRAIN, generator=g).tolist())


def _model(dropout: float = 0.0) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(48, 16),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(16, 3),
    )


def _recipe(loss_fn=None, **changes) -> Recipe:
    return Recipe(
        lr=0.05,
        optimizer=torch.optim.SGD,
        loss_fn=loss_fn,
        test_loss_fn=nn.CrossEntropyLoss(),
        epochs=EPOCHS,
        **changes,
    )


def _weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {
        k: v.detach().clone() for k, v in distributed.unwrap(model).state_dict().items()
    }


def _stop_after_epoch_1(epoch, results):
    return epoch == 1


def _worker(rank: int, port: int, out: str) -> None:
    """One rank: every scenario; saves what it saw to ``out/rank<r>.pt``."""
    os.environ.update(
        RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
    )  # fmt: skip
    torch.set_num_threads(1)
    ctx = distributed.from_environment(timeout_s=30)
    saved: dict = {"ctx": (ctx.rank, ctx.world_size, ctx.backend, ctx.is_main)}
    train = _Indexed(N_TRAIN, seed=1)
    loader = distributed.shard(
        DataLoader(train, batch_size=BATCH // 2), ctx, shuffle=True, seed=SEED
    )
    test_loader = DataLoader(_Indexed(N_TEST, seed=2), batch_size=4)
    # (a), (c): the steps' losses and the images each one read.
    loss_fn, model = _RecordedLoss(), _model()
    saved["results"] = fit(
        model, loader, test_loader, _recipe(loss_fn), distributed=ctx, progress=False
    )
    saved["losses"], saved["read"] = loss_fn.values, list(train.read)
    saved["weights"] = _weights(model)
    # (d): a distributed evaluation of an odd-sized test set.
    counted = _Indexed(N_TEST, seed=2)
    saved["evaluated"] = evaluate(
        model, DataLoader(counted, batch_size=4), nn.CrossEntropyLoss(), ctx.device,
        progress=False, distributed=ctx,
    )  # fmt: skip
    saved["evaluated_read"] = list(counted.read)
    # (b): with dropout and a stateful batch transform, uninterrupted, then stopped after
    # epoch 1 and resumed (after other random draws) from the checkpoint.
    runs = {}
    for name, callbacks in (
        ("whole", ()),
        ("stopped", [_stop_after_epoch_1]),
        ("resumed", ()),
    ):
        model = _model(dropout=0.3)
        if name == "resumed":
            torch.manual_seed(
                123
            )  # other random draws: the checkpoint restores the state
        results = fit(
            model, loader, test_loader, _recipe(batch_transform=Jitter(3)),
            distributed=ctx, progress=False, callbacks=callbacks,
            checkpoint_dir=None if name == "whole" else os.path.join(out, "ckpt"),
        )  # fmt: skip
        runs[name] = (results, _weights(model))
    saved["runs"] = runs
    # A NaN image on rank 1 (index 5: its third sample, in its first batch).
    broken = _Indexed(N_TRAIN, seed=1)
    broken.x[5] = float("nan")
    loader = distributed.shard(DataLoader(broken, batch_size=4), ctx, shuffle=False)
    try:
        fit(_model(), loader, None, _recipe(), distributed=ctx, progress=False)
    except NonFiniteLossError as error:
        saved["nan"] = str(error)
    torch.save(saved, os.path.join(out, f"rank{rank}.pt"))
    distributed.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """What each of the two ranks saw."""
    out = tmp_path_factory.mktemp("ddp")
    mp.spawn(_worker, args=(_free_port(), str(out)), nprocs=2, join=True)
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in (0, 1)]


def _one_process():
    """The same training in one process, with the whole global batch."""
    train = _Indexed(N_TRAIN, seed=1)
    loader = DataLoader(train, batch_size=BATCH, sampler=_DistributedOrder())
    test_loader = DataLoader(_Indexed(N_TEST, seed=2), batch_size=4)
    loss_fn, model = _RecordedLoss(), _model()
    results = fit(
        model, loader, test_loader, _recipe(loss_fn), device="cpu", progress=False
    )
    return results, loss_fn.values, model


def test_the_context_names_each_rank(ranks):
    assert [r["ctx"] for r in ranks] == [(0, 2, "gloo", True), (1, 2, "gloo", False)]
    assert distributed.from_environment() is None  # not under torchrun here


def test_two_processes_take_the_steps_of_one_with_the_whole_batch(ranks):
    results, losses, model = _one_process()
    steps = EPOCHS * N_TRAIN // BATCH
    assert len(losses) == steps and all(len(r["losses"]) == steps for r in ranks)
    for step, single in enumerate(losses):
        both = (ranks[0]["losses"][step] + ranks[1]["losses"][step]) / 2
        assert both == pytest.approx(single, abs=1e-5), step
    for name, value in model.state_dict().items():
        for rank in ranks:
            torch.testing.assert_close(rank["weights"][name], value, atol=1e-5, rtol=0)
    for key in ("train_loss", "train_acc", "test_loss", "test_acc"):
        for rank in ranks:  # every rank reports the global values
            assert rank["results"][key] == pytest.approx(results[key], abs=1e-5), key


def test_every_training_image_is_read_once_per_epoch_in_a_new_order(ranks):
    per_rank = N_TRAIN // 2
    orders = []
    for epoch in range(EPOCHS):
        shares = [r["read"][epoch * per_rank : (epoch + 1) * per_rank] for r in ranks]
        assert sorted(shares[0] + shares[1]) == list(range(N_TRAIN)), epoch
        g = torch.Generator().manual_seed(
            SEED + epoch + 1
        )  # set_epoch(epoch) each epoch
        expected = torch.randperm(N_TRAIN, generator=g).tolist()
        for step in range(N_TRAIN // BATCH):  # each global batch: the two halves
            half = slice(step * BATCH // 2, (step + 1) * BATCH // 2)
            together = sorted(shares[0][half] + shares[1][half])
            assert together == sorted(expected[step * BATCH : (step + 1) * BATCH])
        orders.append(shares[0])
    assert orders[0] != orders[1] != orders[2]


def test_a_distributed_evaluation_counts_every_test_sample_once(ranks):
    counted = sorted(ranks[0]["evaluated_read"] + ranks[1]["evaluated_read"])
    assert counted == list(range(N_TEST))
    model = _model()
    model.load_state_dict(ranks[0]["weights"])
    whole = evaluate(
        model,
        DataLoader(_Indexed(N_TEST, seed=2), batch_size=N_TEST),
        nn.CrossEntropyLoss(),
        "cpu",
        progress=False,
    )
    for rank in ranks:
        assert rank["evaluated"] == pytest.approx(whole, abs=1e-6)


def test_a_stopped_and_resumed_run_equals_an_uninterrupted_one(ranks):
    for rank in ranks:
        (whole, whole_weights) = rank["runs"]["whole"]
        (stopped, _), (resumed, resumed_weights) = (
            rank["runs"]["stopped"],
            rank["runs"]["resumed"],
        )
        assert len(stopped["train_loss"]) == 1 and len(resumed["train_loss"]) == EPOCHS
        for key in ("train_loss", "train_acc", "test_loss", "test_acc"):
            assert resumed[key] == whole[key], key
        for name, value in whole_weights.items():
            assert torch.equal(resumed_weights[name], value), name


def test_a_nan_on_one_rank_stops_every_rank_at_that_step(ranks):
    ours, other = ranks[1].get("nan"), ranks[0].get("nan")
    assert ours is not None and other is not None
    assert "became nan at epoch 1, step 1" in ours
    assert "48 NaN/infinite value(s) in this batch's inputs" in ours  # one image
    assert "in another process at epoch 1, step 1" in other
