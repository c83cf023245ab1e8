"""The command line's model files (``vitbook.training.model_files``): checksummed, rebuilt by name; seeds, the device and channels-last weights."""

from __future__ import annotations

import os
import random
import stat

import numpy as np
import pytest
import torch

from going_modular import utils
from going_modular.models import build_model
from going_modular.models.registry import _REGISTRY
from vitbook.training import model_files
from vitbook.training.checkpoint import CHECKSUM_KEY, content_sha256
from vitbook.training.speed import prefer_channels_last


def test_set_seeds_makes_every_generator_repeat():
    def draw():
        return random.random(), np.random.rand(), torch.rand(1).item()

    utils.set_seeds(7)
    first = draw()
    utils.set_seeds(7)
    assert draw() == first


def test_checkpoint_round_trip_gives_identical_predictions(tmp_path):
    model = build_model("tinyvgg", num_classes=3, img_size=32).eval()
    x = torch.randn(4, 3, 32, 32)
    path = model_files.save_model(
        model, tmp_path, "tiny.pth", class_names=["a", "b", "c"]
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "tiny.pth"
    ]  # no temporary file left
    rebuilt = model_files.load_model(path).eval()
    assert torch.equal(model(x), rebuilt(x))
    into = build_model("tinyvgg", num_classes=3, img_size=32)
    assert torch.equal(model(x), model_files.load_model(path, into).eval()(x))
    assert torch.load(path, weights_only=True)["class_names"] == ["a", "b", "c"]


def test_checkpoint_that_does_not_fit_the_model(tmp_path):
    path = model_files.save_model(
        build_model("tinyvgg", num_classes=3), tmp_path, "m.pt"
    )
    with pytest.raises(
        ValueError, match="(?s)does not match this model.*same architecture"
    ):
        model_files.load_model(path, build_model("tinyvgg", num_classes=5))


def test_bad_names_and_files(tmp_path):
    with pytest.raises(ValueError, match=r"\.pt' or '\.pth'"):
        model_files.save_model(torch.nn.Linear(1, 1), tmp_path, "model.bin")
    with pytest.raises(FileNotFoundError, match="No checkpoint"):
        model_files.load_model(tmp_path / "missing.pth")
    torch.save({"weights": torch.ones(1)}, tmp_path / "foreign.pth")
    with pytest.raises(ValueError, match="not a checkpoint written by"):
        model_files.load_model(tmp_path / "foreign.pth")
    plain = model_files.save_model(torch.nn.Linear(1, 1), tmp_path, "plain.pth")
    with pytest.raises(ValueError, match="pass the model to load into"):
        model_files.load_model(plain)


def test_unknown_model_name():
    with pytest.raises(
        ValueError, match="Unknown model 'resnet9000'. Choose one of: .*tinyvgg"
    ):
        build_model("resnet9000")


@pytest.mark.parametrize("cuda", [True, False])
def test_get_device_is_cuda_exactly_when_there_is_a_gpu(cuda, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert utils.get_device() == torch.device("cuda" if cuda else "cpu")


def _tiny():
    return build_model("tinyvgg", num_classes=3, img_size=8)


def test_broken_checkpoint_files_say_what_they_are(tmp_path):
    good = model_files.save_model(_tiny(), tmp_path, "good.pth").read_bytes()
    cases = {
        "empty.pth": (b"", "is empty \\(0 bytes\\)"),
        "cut.pth": (good[: len(good) // 2], "is truncated"),
        "notes.pth": (b"these are my notes, not weights", "is not a PyTorch file"),
    }
    for name, (content, message) in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ValueError, match=f"Cannot load .*{name}: it {message}"):
            model_files.load_model(tmp_path / name, _tiny())
    torch.save(torch.nn.Linear(1, 1), tmp_path / "pickled.pth")
    with pytest.raises(ValueError, match="holds Python objects besides tensors"):
        model_files.load_model(tmp_path / "pickled.pth")


def test_plain_state_dict_is_explained_and_loads_into_a_given_model(tmp_path):
    source = _tiny().eval()
    torch.save(source.state_dict(), tmp_path / "plain.pth")
    with pytest.raises(ValueError) as info:
        model_files.load_model(tmp_path / "plain.pth")
    assert "holds a plain state_dict" in str(info.value)
    assert "load_model(path, model)" in str(info.value)
    loaded = model_files.load_model(tmp_path / "plain.pth", _tiny()).eval()
    x = torch.randn(2, 3, 8, 8)
    assert torch.equal(source(x), loaded(x))


def test_checkpoints_get_the_umask_permissions(tmp_path):
    previous = os.umask(0o027)
    try:
        path = model_files.save_model(_tiny(), tmp_path, "m.pth")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_temporaries_of_an_interrupted_save_are_removed_next_time(tmp_path, dead_pid):
    dead = tmp_path / f".model.pth.partial-{dead_pid}-abcd1234"
    ours = tmp_path / f".model.pth.partial-{os.getpid()}-zzzz9999"  # a save in progress
    backups = [".model.pth-20240101", ".model.pth-k2j3h4_x", ".model.pth-notes.txt"]
    for path in (dead, ours, *(tmp_path / name for name in backups)):
        path.write_bytes(b"partial")
    model_files.save_model(_tiny(), tmp_path, "model.pth")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [ours.name, *backups, "model.pth"]
    )  # a user's backups that look like old-style temporaries are never touched


def test_non_finite_weights_are_never_saved(tmp_path):
    model = _tiny()
    with torch.no_grad():
        next(model.parameters())[0].fill_(float("nan"))
    with pytest.raises(ValueError, match="Refusing to save m.pth: 1 weight tensor"):
        model_files.save_model(model, tmp_path, "m.pth")
    assert list(tmp_path.iterdir()) == []


def test_saving_into_a_file_says_so(tmp_path):
    (tmp_path / "taken").write_text("notes")
    with pytest.raises(NotADirectoryError, match="it is a file, not a folder"):
        model_files.save_model(_tiny(), tmp_path / "taken", "m.pth")


def test_prefer_channels_last_only_for_overlapping_convolutions(tmp_path):
    cct = prefer_channels_last(build_model("cct_2_3x2", num_classes=10))
    conv = cct.tokenizer.conv_layers[0][0].weight
    assert conv.is_contiguous(memory_format=torch.channels_last)
    assert not conv.is_contiguous()
    vit = prefer_channels_last(build_model("vit_lite_2_4", num_classes=10))
    assert all(p.is_contiguous() for p in vit.parameters())  # patchify: unchanged
    x = torch.randn(2, 3, 32, 32)
    reference = build_model("cct_2_3x2", num_classes=10)
    reference.load_state_dict(cct.state_dict())
    torch.testing.assert_close(cct.eval()(x), reference.eval()(x))
    path = model_files.save_model(
        cct, tmp_path, "cct.pth"
    )  # its checkpoint loads as usual
    torch.testing.assert_close(model_files.load_model(path).eval()(x), reference(x))


def _checkpoint(tmp_path, **changes):
    """A valid checkpoint of ``_tiny()`` with ``changes`` applied, saved as raw torch
    (without the checksum, as a checkpoint written by hand)."""
    path = model_files.save_model(_tiny(), tmp_path, "good.pth")
    checkpoint = torch.load(path, weights_only=True) | changes
    del checkpoint[CHECKSUM_KEY]
    torch.save(checkpoint, tmp_path / "edited.pth")
    return tmp_path / "edited.pth"


def test_a_flipped_bit_or_an_edit_is_refused_by_its_checksum(tmp_path):
    path = model_files.save_model(
        _tiny(), tmp_path, "model.pth", class_names=["a", "b", "c"]
    )
    saved = torch.load(path, weights_only=True)
    assert saved[CHECKSUM_KEY] == content_sha256(
        {k: v for k, v in saved.items() if k != CHECKSUM_KEY}
    )
    content = path.read_bytes()
    weights = saved["state_dict"]["head.1.weight"].numpy().tobytes()
    at = content.index(weights[:64])  # a bit inside the weights' bytes
    flipped = tmp_path / "flipped.pth"
    flipped.write_bytes(content[:at] + bytes([content[at] ^ 0x01]) + content[at + 1 :])
    with pytest.raises(ValueError, match=f"{flipped}.*(corrupt|checksum)"):
        model_files.load_model(flipped, _tiny())
    edited = tmp_path / "edited.pth"
    torch.save(saved | {"class_names": ["x", "b", "c"]}, edited)
    with pytest.raises(ValueError, match="do not match the SHA-256 checksum"):
        model_files.load_model(edited)


def test_a_bogus_device_is_reported_as_such(tmp_path):
    path = model_files.save_model(_tiny(), tmp_path, "m.pth")
    with pytest.raises(
        ValueError, match="device='bogus' is not a device PyTorch knows"
    ):
        model_files.load_model(path, device="bogus")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="this machine has no CUDA GPU"):
            model_files.load_model(path, device="cuda")


def test_any_device_that_holds_tensors_gets_the_model(tmp_path):
    """An indexed CPU and the shapes-only meta device load (they were "a corrupt file"
    and a raw NotImplementedError); a backend this build lacks is said to be one."""
    model = _tiny()
    path = model_files.save_model(model, tmp_path, "m.pth")
    on_cpu = model_files.load_model(path, _tiny(), device="cpu:7")
    assert all(
        torch.equal(a, b) for a, b in zip(on_cpu.parameters(), model.parameters())
    )
    on_meta = model_files.load_model(path, _tiny(), device="meta")
    assert {p.device.type for p in on_meta.parameters()} == {"meta"}
    assert [p.shape for p in on_meta.parameters()] == [
        p.shape for p in model.parameters()
    ]
    if not torch.backends.mps.is_available():
        with pytest.raises(
            ValueError, match="device='mps' cannot hold tensors on this"
        ):
            model_files.load_model(path, _tiny(), device="mps")


def test_a_checkpoint_of_an_unknown_format_is_refused(tmp_path):
    path = _checkpoint(tmp_path, format=99)
    with pytest.raises(ValueError, match="format 99; this version of going_modular"):
        model_files.load_model(path)


def test_nan_weights_are_refused_on_load(tmp_path):
    state = {
        k: torch.full_like(v, float("nan")) for k, v in _tiny().state_dict().items()
    }
    path = _checkpoint(tmp_path, state_dict=state)
    with pytest.raises(ValueError, match="Refusing to load .*weight tensor.*NaN"):
        model_files.load_model(path)
    with pytest.raises(ValueError, match="Refusing to load"):
        model_files.load_model(path, _tiny())


def test_a_build_config_larger_than_its_weights_is_refused_before_allocating(
    tmp_path, monkeypatch
):
    built_on = []
    real_build = model_files.build_model

    def build_model(name, **kwargs):
        built_on.append(str(torch.empty(0).device))
        return real_build(name, **kwargs)

    monkeypatch.setattr(model_files, "build_model", build_model)
    path = _checkpoint(
        tmp_path, build_config={"name": "vit_b_16", "kwargs": {"num_classes": 10}}
    )  # a 50 KB file asking for an 86-million-weight ViT-B/16 (344 MB)
    with pytest.raises(ValueError, match="describes 85,806,346 weight values but"):
        model_files.load_model(path)
    assert built_on == ["meta"]  # never on the CPU


def test_a_checkpoint_never_triggers_a_pretrained_download(tmp_path, monkeypatch):
    asked = []

    def pretrained_linear(num_classes: int = 2, weights: str | None = "DEFAULT"):
        asked.append(weights)  # vit_b_16_pretrained would download its weights here
        return torch.nn.Linear(3, num_classes)

    monkeypatch.setitem(_REGISTRY, "pretrained_linear", pretrained_linear)
    model = build_model("pretrained_linear", weights=None)
    path = tmp_path / "edited.pth"
    torch.save(
        {
            "format": model_files.CHECKPOINT_FORMAT,
            "state_dict": model.state_dict(),
            "build_config": {
                "name": "pretrained_linear",
                "kwargs": {"num_classes": 2, "weights": "IMAGENET1K_V1"},
            },
        },
        path,
    )
    loaded = model_files.load_model(path)
    assert asked == [None, None, None]  # built, checked on meta, rebuilt: never fetched
    assert torch.equal(loaded.weight, model.weight)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"build_config": {"name": "tinyvgg"}}, "records a build_config that cannot"),
        (
            {"build_config": {"name": "tinyvgg", "kwargs": {"heads": 3}}},
            "unexpected keyword argument 'heads'",
        ),
        ({"state_dict": [1, 2]}, "is damaged: its state_dict is not a mapping"),
    ],
)
def test_a_broken_build_config_or_state_dict_is_explained(tmp_path, changes, message):
    with pytest.raises(ValueError, match=message):
        model_files.load_model(_checkpoint(tmp_path, **changes))
