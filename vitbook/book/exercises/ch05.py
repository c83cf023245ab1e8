"""Chapter 5's exercises: the encoder from PyTorch's own layers, the ViT as one script you
can import, ViT-B/32's tokens and parameters, and what the class token sees after zero and
one block."""

from __future__ import annotations

import importlib.util
import re
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from vitbook.book.built.ch04 import Block
from vitbook.book.built.ch05 import ViT
from vitbook.book.exercises import Exercise, Mistake
from vitbook.book.reference import randomize_vectors_
from vitbook.models.complexity import count_params
from vitbook.models.convert import TORCH_LAYER_KEYS, load_renamed

__all__ = ["SCRIPT", "ex1", "ex2", "ex3", "ex4"]

# A ViT small enough for a check in well under a second: 4 x 4 patches of 8 x 8 pixels.
_SMALL = dict(
    img_size=32, patch_size=8, dim=48, depth=2, heads=3, mlp_ratio=2.0, num_classes=3
)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, atol=1e-5, rtol=1e-4)


def _small_vit(depth: int = 2, seed: int = 0) -> ViT:
    """The chapter's ViT in the small configuration, LayerNorms and biases randomised (a
    LayerNorm's weight 1 and bias 0 would hide two swapped norms)."""
    torch.manual_seed(seed)
    return randomize_vectors_(ViT(**{**_SMALL, "depth": depth})).eval()


# Exercise 1 ------------------------------------------------------------------------------


def _torch_layers_encoder(dim: int, depth: int, heads: int, mlp_ratio: float):
    layer = nn.TransformerEncoderLayer(
        dim,
        heads,
        dim_feedforward=int(dim * mlp_ratio),
        dropout=0.0,
        activation="gelu",
        layer_norm_eps=1e-6,
        batch_first=True,
        norm_first=True,
    )
    return nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)


def _check_torch_layers_encoder(torch_layers_encoder) -> str:
    dim, depth, heads, ratio = 48, 2, 3, 2.0
    torch.manual_seed(0)
    encoder = torch_layers_encoder(dim, depth, heads, ratio)
    blocks = nn.Sequential(*(Block(dim, heads, ratio) for _ in range(depth)))
    layers = [m for m in encoder.modules() if isinstance(m, nn.TransformerEncoderLayer)]
    if len(layers) != depth:
        raise Mistake(
            f"the encoder holds {len(layers)} nn.TransformerEncoderLayer, not depth = "
            f"{depth}: stack depth copies of one layer with nn.TransformerEncoder."
        )
    theirs, ours = count_params(encoder), count_params(blocks)
    if theirs != ours:
        raise Mistake(
            f"your encoder has {theirs:,} parameters, {depth} of chapter 4's blocks "
            f"{ours:,}: dim_feedforward is the MLP's hidden width (mlp_ratio times dim), "
            "and the encoder needs no final norm of its own (the ViT has one)."
        )
    if layers[0].norm1.eps != blocks[0].norm1.eps:
        raise Mistake(
            f"its LayerNorms use eps = {layers[0].norm1.eps:g}, PyTorch's default; the "
            f"ViT's (chapter 4's Block's) is {blocks[0].norm1.eps:g}: set layer_norm_eps."
        )
    randomize_vectors_(encoder)
    load_renamed(blocks, encoder, [(r"^layers\.", ""), *TORCH_LAYER_KEYS])
    tokens = torch.randn(2, 5, dim, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected, got = blocks.eval()(tokens), encoder.eval()(tokens)
    if _close(got, expected):
        return (
            f"with the same weights, {depth} of PyTorch's layers compute what {depth} of "
            "chapter 4's blocks compute."
        )
    if not layers[0].norm_first:
        raise Mistake(
            "same weights, different outputs: the layer is post-norm (PyTorch's default "
            "adds the residual, then normalises); the ViT normalises before attention "
            "and before the MLP: norm_first=True."
        )
    if layers[0].activation is not F.gelu:
        raise Mistake(
            "same weights, different outputs: PyTorch's layer uses ReLU by default; the "
            'ViT\'s MLP uses GELU: activation="gelu".'
        )
    if not layers[0].self_attn.batch_first:
        raise Mistake(
            "same weights, different outputs: without batch_first=True the layer reads "
            "(N, B, D), so the tokens of a (B, N, D) batch attend across images."
        )
    raise Mistake("same weights, but the outputs differ from chapter 4's blocks.")


ex1 = Exercise(
    title="The encoder from PyTorch's layers",
    checker=_check_torch_layers_encoder,
    hint_text=(
        "nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, ...) is one block; "
        "nn.TransformerEncoder(layer, num_layers) stacks copies of it. Read its "
        "signature: four of its defaults differ from the ViT's block (dropout being one "
        "that does not change the outputs in eval mode)."
    ),
    solution_code="""
def torch_layers_encoder(dim, depth, heads, mlp_ratio):
    layer = nn.TransformerEncoderLayer(
        dim,
        heads,
        dim_feedforward=int(dim * mlp_ratio),
        dropout=0.0,  # the ViT's block has none (dropout is the training recipe's)
        activation="gelu",  # default: ReLU
        layer_norm_eps=1e-6,  # default: 1e-5
        batch_first=True,  # default: (N, B, D)
        norm_first=True,  # default: post-norm
    )
    # nn.TransformerEncoder deep-copies the layer: depth layers, independent weights
    return nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)


with torch.device("meta"):
    n_torch = count_params(torch_layers_encoder(768, 12, 12, 4.0))
    n_ours = count_params(ViT().blocks)
print(f"ViT-B/16's encoder: PyTorch's layers {n_torch:,}, chapter 4's blocks {n_ours:,}")
""",
    explanation=(
        "nn.TransformerEncoderLayer is the encoder block of the original Transformer: "
        "post-norm, ReLU, eps 1e-5 and (sequence, batch, features) by default. With "
        "norm_first=True, GELU, eps 1e-6 and batch_first=True it is the ViT's block: the "
        "same parameters (its self_attn.in_proj_weight is our attn.qkv.weight, linear1 "
        "our mlp.fc1), and with the same weights the same outputs. The check copied the "
        "weights with the package's key map TORCH_LAYER_KEYS, after dropping the prefix "
        "'layers.' that nn.TransformerEncoder puts in every name. A pre-norm encoder usually ends "
        "with a LayerNorm; the ViT's is its own norm (Eq. 4), so the encoder gets none."
    ),
    reference=lambda: (_torch_layers_encoder,),
    mistakes=[
        (
            lambda: (
                lambda d, n, h, r: nn.TransformerEncoder(
                    nn.TransformerEncoderLayer(
                        d, h, int(d * r), activation="gelu", batch_first=True,
                        norm_first=True,
                    ),
                    n,
                    enable_nested_tensor=False,
                ),
            ),
            "eps",
        ),
        (
            lambda: (
                lambda d, n, h, r: nn.TransformerEncoder(
                    nn.TransformerEncoderLayer(
                        d, h, int(d * r), activation="gelu", layer_norm_eps=1e-6,
                        batch_first=True,
                    ),
                    n,
                    enable_nested_tensor=False,
                ),
            ),
            "post-norm",
        ),
        (
            lambda: (
                lambda d, n, h, r: nn.TransformerEncoder(
                    nn.TransformerEncoderLayer(
                        d, h, int(d * r), layer_norm_eps=1e-6, batch_first=True,
                        norm_first=True,
                    ),
                    n,
                    enable_nested_tensor=False,
                ),
            ),
            "ReLU",
        ),
        (
            lambda: (
                lambda d, n, h, r: nn.TransformerEncoder(
                    nn.TransformerEncoderLayer(
                        d, h, d, activation="gelu", layer_norm_eps=1e-6,
                        batch_first=True, norm_first=True,
                    ),
                    n,
                    enable_nested_tensor=False,
                ),
            ),
            "dim_feedforward",
        ),
    ],
)  # fmt: skip


# Exercise 2 ------------------------------------------------------------------------------

SCRIPT = '''\
"""A Vision Transformer in one file (Dosovitskiy et al., 2021), ViT-B/16 by default.

Import it, or run python vit_script.py to classify a random image.
"""

import torch
import torch.nn.functional as F
from torch import nn


class PatchEmbedding(nn.Module):
    # Eq. 1's x_p E: cut the image into patches and project each one to dim numbers
    def __init__(self, in_channels=3, patch_size=16, dim=768):
        super().__init__()
        self.proj = nn.Conv2d(in_channels, dim, patch_size, stride=patch_size)

    def forward(self, x):  # (B, C, H, W) -> (B, N, dim)
        return self.proj(x).flatten(2).transpose(1, 2)


class Attention(nn.Module):
    # MSA of Eq. 2: one Linear makes every head's queries, keys and values
    def __init__(self, dim=768, heads=12):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):  # (B, N, dim) -> (B, N, dim)
        B, N, D = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, D // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (B, heads, N, D / heads)
        out = F.scaled_dot_product_attention(q, k, v)  # softmax(q k^T / sqrt(d)) v
        return self.proj(out.transpose(1, 2).reshape(B, N, D))


class Mlp(nn.Module):
    # MLP of Eq. 3: Linear, GELU, Linear
    def __init__(self, dim=768, hidden_dim=3072):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_dim, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    # One pre-norm encoder block: Eq. 2, then Eq. 3
    def __init__(self, dim=768, heads=12, mlp_ratio=4.0, eps=1e-6):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))  # Eq. 2
        return x + self.mlp(self.norm2(x))  # Eq. 3


class ViT(nn.Module):
    # Figure 1: z_0 (Eq. 1), depth blocks, LN of token 0 (Eq. 4), a linear head
    def __init__(
        self, img_size=224, patch_size=16, in_channels=3, num_classes=1000,
        dim=768, depth=12, heads=12, mlp_ratio=4.0,
    ):
        super().__init__()
        num_patches = (img_size // patch_size) ** 2
        self.patch_embed = PatchEmbedding(in_channels, patch_size, dim)
        self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, dim))
        self.pos_embed = nn.Parameter(0.02 * torch.randn(1, num_patches + 1, dim))
        self.blocks = nn.Sequential(
            *[Block(dim, heads, mlp_ratio) for _ in range(depth)]
        )
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):  # (B, C, H, W) -> (B, num_classes)
        cls_token = self.cls_token.expand(len(x), -1, -1)
        z = torch.cat([cls_token, self.patch_embed(x)], dim=1) + self.pos_embed
        z = self.blocks(z)
        return self.head(self.norm(z[:, 0]))


if __name__ == "__main__":
    model = ViT(num_classes=3).eval()
    with torch.no_grad():
        print(model(torch.randn(1, 3, 224, 224)).softmax(dim=-1))
'''
"""The reference answer of exercise 2: the chapter's ViT as one self-contained file."""

_VIT_B_16_PARAMS = 86_567_656
_BOOK_IMPORT = re.compile(r"^\s*(from|import)\s+(vitbook|going_modular)\b", re.M)


def _import_script(source: str):
    """Write ``source`` to a temporary ``vit_script.py`` and import it as a module."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "vit_script.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location("vit_script", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


def _check_script(source) -> str:
    if not isinstance(source, str):
        raise Mistake(
            f"give the script's text, a string, not a {type(source).__name__}."
        )
    if "____" in source:
        raise Mistake("fill in the blanks (____) in the script first.")
    if _BOOK_IMPORT.search(source):
        raise Mistake(
            "the script imports the book's packages: a self-contained file needs only "
            "torch, so that it runs wherever torch is installed."
        )
    script = _import_script(source)
    if not isinstance(getattr(script, "ViT", None), type):
        raise Mistake("the script defines no class ViT.")
    with torch.device("meta"):
        n = count_params(script.ViT())
    if n != _VIT_B_16_PARAMS:
        raise Mistake(
            f"ViT() builds {n:,} parameters, not ViT-B/16's {_VIT_B_16_PARAMS:,}: check "
            "the defaults and the sizes of each layer."
        )
    ours = _small_vit()
    try:
        theirs = script.ViT(**_SMALL).eval()
    except TypeError as error:
        raise Mistake(
            f"ViT(**{_SMALL}) failed ({error}): keep the chapter's argument names."
        ) from None
    try:
        theirs.load_state_dict(ours.state_dict())
    except RuntimeError as error:
        problem = str(error).splitlines()[1].strip()
        raise Mistake(
            f"the chapter's weights do not load into your ViT ({problem}): give each "
            "part the chapter's name (patch_embed, cls_token, pos_embed, blocks, norm, "
            "head; inside a block norm1, attn, norm2, mlp)."
        ) from None
    tokens = torch.randn(
        2, 5, _SMALL["dim"], generator=torch.Generator().manual_seed(0)
    )
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        if not _close(theirs.blocks[0](tokens), ours.blocks[0](tokens)):
            raise Mistake(
                "with the chapter's weights, your Block's output differs from chapter "
                "4's: Eq. 2 and 3 normalise the tokens, apply attention (or the MLP), "
                "then add the block's input."
            )
        if not _close(theirs(images), ours(images)):
            raise Mistake(
                "your blocks agree with chapter 4's, but the logits differ from the "
                "chapter's ViT: Eq. 1 puts the class token first and adds E_pos; Eq. 4 "
                "reads token 0 of the last block's output through the final LayerNorm."
            )
    return "the file builds ViT-B/16 and, with the chapter's weights, its logits."


def _broken(old: str, new: str) -> str:
    """The reference script with one typical mistake."""
    assert old in SCRIPT, old
    return SCRIPT.replace(old, new)


ex2 = Exercise(
    title="A script you can import",
    checker=_check_script,
    hint_text=(
        "Each blank is one line of the chapter's code: the two residual updates of a "
        "block (Eq. 2 and 3), z_0 (Eq. 1), and the head applied to Eq. 4's y. The names "
        "must be the chapter's, so that its weights load."
    ),
    solution_code=(
        "VIT_SCRIPT = '''\\\n" + SCRIPT + "'''\n\nex2.check(VIT_SCRIPT)\n"
        "\n# Run as a script, from a terminal: python vit_script.py\n"
    ),
    explanation=(
        "The file repeats the chapter's classes without the book's checks: it imports "
        "only torch, so it can be copied to any project. Its parts have the chapter's "
        "names, which are the package's (and timm's), so one state dict loads into the "
        "chapter's ViT, the package's and this file's: the names are the interface "
        "between implementations. The attention is F.scaled_dot_product_attention, "
        "PyTorch's fused softmax(q k^T / sqrt(d)) v, which gives the same numbers as "
        "chapter 3's to float32 rounding."
    ),
    reference=lambda: (SCRIPT,),
    mistakes=[
        (
            lambda: (
                _broken(
                    "x = x + self.attn(self.norm1(x))",
                    "x = self.norm1(x + self.attn(x))",
                ),
            ),
            "your Block's output differs",
        ),
        (
            lambda: (_broken("self.norm(z[:, 0])", "self.norm(z.mean(dim=1))"),),
            "the logits differ",
        ),
        (
            lambda: (_broken("self.cls_token", "self.class_token"),),
            "do not load",
        ),
    ],
)


# Exercise 3 ------------------------------------------------------------------------------


def _vit_b_32() -> ViT:
    return ViT(patch_size=32)


_WHY = {
    "a": (
        "the blocks' weights depend on D, the MLP size and the number of layers, not on "
        "the patch size: they are the same as B/16's."
    ),
    "c": (
        "larger patches mean fewer of them, so the position embedding has fewer rows "
        "than B/16's, not more."
    ),
    "d": (
        "the head maps D = 768 features to the classes, whatever the patch size: the "
        "same as B/16's."
    ),
}


def _check_vit_b_32(vit_b_32, why) -> str:
    with torch.device("meta"):
        model = vit_b_32()
        tokens = model.patch_embed(torch.zeros(1, 3, 224, 224)).shape[1] + 1
        n = count_params(model)
        expected = count_params(torchvision.models.vit_b_32(weights=None))
        b16 = count_params(ViT())
    if tokens != 50:
        raise Mistake(
            f"your model turns a 224 x 224 image into {tokens} tokens: ViT-B/32 cuts it "
            "into 32 x 32 patches."
        )
    if n != expected:
        raise Mistake(
            f"your model has {n:,} parameters, torchvision's vit_b_32 has {expected:,}: "
            "only the patch size changes; ViT-Base keeps its width, depth, heads, MLP "
            "and 1000 classes."
        )
    if why not in ("a", "b", "c", "d"):
        raise Mistake(f"answer the question with one letter, 'a' to 'd', not {why!r}.")
    if why in _WHY:
        raise Mistake(f"the model is right, but not the reason ({why}): {_WHY[why]}")
    return f"ViT-B/32 has {n:,} parameters, {n - b16:,} more than ViT-B/16."


ex3 = Exercise(
    title="ViT-B/32",
    checker=_check_vit_b_32,
    hint_text=(
        "Table 1's ViT-Base with another patch size: only one argument of the chapter's "
        "ViT changes. For the question, count the parameters of each part of both models "
        "(patch_embed, cls_token and pos_embed, blocks, head) and see which part grows."
    ),
    solution_code="""
def vit_b_32():
    return ViT(patch_size=32)


why = "b"

with torch.device("meta"):
    b32, b16 = vit_b_32(), ViT()
for name in ("patch_embed", "blocks", "head"):
    print(f"{name:11s} B/32 {count_params(getattr(b32, name)):>11,} | "
          f"B/16 {count_params(getattr(b16, name)):>11,}")
print(f"pos_embed   B/32 {b32.pos_embed.numel():>11,} | B/16 {b16.pos_embed.numel():>11,}")
b32_macs = count_macs(ViT(patch_size=32, num_classes=3), (1, 3, 224, 224))["total"]
print(f"multiply-accumulates per image: B/32 {b32_macs / 1e9:.2f} G | "
      f"B/16 {macs['total'] / 1e9:.2f} G")
""",
    explanation=(
        "A 224 x 224 image gives (224 / 32)^2 = 49 patches of 32 x 32, so 50 tokens with "
        "the class token (B/16: 197). Each patch has 3 * 32 * 32 = 3072 numbers, so the "
        "projection E has four times the weights of B/16's (+1.8M parameters), while the "
        "position embedding shrinks from 197 to 50 rows (-0.1M): ViT-B/32 has more "
        "parameters. The encoder has the same weights, but every linear layer runs on 50 "
        "tokens instead of 197, and attention on 50^2 instead of 197^2 pairs: about four "
        "times less compute (count_macs above). Parameters and compute are different "
        "costs: the tokens' number sets the compute, the layers' sizes the parameters."
    ),
    reference=lambda: (_vit_b_32, "b"),
    mistakes=[
        (lambda: (lambda: ViT(patch_size=16), "b"), "32 x 32 patches"),
        (lambda: (lambda: ViT(patch_size=32, num_classes=3), "b"), "vit_b_32 has"),
        (lambda: (_vit_b_32, "a"), "the same as B/16's"),
        (lambda: (_vit_b_32, "c"), "fewer rows"),
    ],
)


# Exercise 4 ------------------------------------------------------------------------------


def _patch_gradients(model: ViT, image: torch.Tensor) -> torch.Tensor:
    image = image.clone().requires_grad_(True)
    model(image)[0, 0].backward()
    P = model.patch_embed.proj.kernel_size[0]
    grid = model.img_size // P
    return image.grad[0].abs().sum(0).reshape(grid, P, grid, P).sum((1, 3))


def _patch_gradients_rows(model: ViT, image: torch.Tensor) -> torch.Tensor:
    """A typical mistake: (H, W) reshaped as (grid, grid, P, P), which mixes patches."""
    image = image.clone().requires_grad_(True)
    model(image)[0, 0].backward()
    P = model.patch_embed.proj.kernel_size[0]
    grid = model.img_size // P
    return image.grad[0].abs().sum(0).reshape(grid, grid, P, P).sum((2, 3))


def _patch_gradients_signed(model: ViT, image: torch.Tensor) -> torch.Tensor:
    """A typical mistake: the signed gradient summed, so positive and negative cancel."""
    image = image.clone().requires_grad_(True)
    model(image)[0, 0].backward()
    P = model.patch_embed.proj.kernel_size[0]
    grid = model.img_size // P
    return image.grad[0].sum(0).reshape(grid, P, grid, P).sum((1, 3))


def _receptive_field(layers: int) -> int:
    return 1 + 2 * layers


def _check_class_token(patch_gradients, receptive_field) -> str:
    image = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    grid = _SMALL["img_size"] // _SMALL["patch_size"]
    one_block = _small_vit(depth=1)
    got = patch_gradients(one_block, image)
    if not isinstance(got, torch.Tensor) or tuple(got.shape) != (grid, grid):
        shape = (
            tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
        )
        raise Mistake(
            f"patch_gradients returned {shape}: one number per patch, a (grid, grid) "
            f"tensor, ({grid}, {grid}) for a 32 x 32 image of 8 x 8 patches."
        )
    got = got.detach()
    if not _close(got, _patch_gradients(one_block, image)):
        if _close(got, _patch_gradients_signed(one_block, image)):
            raise Mistake(
                "patch_gradients sums the gradient's signed values, so positive and "
                "negative pixels cancel: take its absolute value first."
            )
        if _close(got, _patch_gradients_rows(one_block, image)):
            raise Mistake(
                "patch_gradients mixes pixels of different patches: an (H, W) map "
                "splits into (grid, P, grid, P), the row of the patch, the row inside "
                "it, the column of the patch, the column inside it."
            )
        raise Mistake(
            "patch_gradients differs from |d logit_0 / d pixel| summed over the "
            "channels and over the pixels of each patch."
        )
    no_block = _small_vit(depth=0)
    if torch.count_nonzero(patch_gradients(no_block, image)):
        raise Mistake("with no block, no pixel should receive a gradient.")
    for layers in range(5):
        if receptive_field(layers) != _receptive_field(layers):
            raise Mistake(
                f"receptive_field({layers}) = {receptive_field(layers)}: a 3 x 3 "
                "convolution with stride 1 widens what a pixel sees by one pixel on "
                "each side, and with no layer a pixel sees itself alone."
            )
    return "every patch reaches the class token after one block."


ex4 = Exercise(
    title="What the class token sees",
    checker=_check_class_token,
    hint_text=(
        "image.grad has the image's shape (1, 3, H, W). Make every entry positive, add "
        "the channels, then split each of the two pixel axes into (patch index, pixel "
        "inside the patch) with reshape and add over the pixel axes. For the "
        "convolutions: draw one output pixel and the input pixels it depends on after "
        "one, then two 3 x 3 layers."
    ),
    solution_code="""
def patch_gradients(model, image):
    image = image.clone().requires_grad_(True)
    model(image)[0, 0].backward()  # d logit_0 / d pixel lands in image.grad
    P = model.patch_embed.proj.kernel_size[0]
    grid = model.img_size // P
    # (3, H, W) -> (H, W) -> (grid, P, grid, P) -> (grid, grid)
    return image.grad[0].abs().sum(0).reshape(grid, P, grid, P).sum((1, 3))


def receptive_field(layers):
    return 1 + 2 * layers  # each 3 x 3 layer adds a pixel on each side


SMALL = dict(dim=192, mlp_ratio=4.0, heads=3, num_classes=3)
set_seeds(0)
no_block, one_block = ViT(depth=0, **SMALL).eval(), ViT(depth=1, **SMALL).eval()
with torch.no_grad():
    logits_0 = no_block(images)
print("L = 0, the two images' logits are equal:", agree(logits_0[0], logits_0[1]))
for name, model in (("L = 0", no_block), ("L = 1", one_block)):
    grad = patch_gradients(model, images[:1])
    print(f"{name}: {int((grad > 0).sum())} of {grad.numel()} patches move logit 0")
layers = next(n for n in range(1000) if receptive_field(n) >= 224)
print(f"3 x 3 convolutions before one pixel sees 224 pixels across: {layers}")
""",
    explanation=(
        "With no block, token 0 never meets a patch: every image gets the same logits, "
        "those of the head applied to x_class + E_pos^0, and no pixel receives any "
        "gradient. One block connects it to all 196 patches at once: token 0's query is "
        "compared with the key of every patch, so each patch can move the logits, which "
        "the gradients confirm. A 3 x 3 convolution sees a 3 x 3 neighbourhood, and each "
        "further 3 x 3 layer (without pooling or strides) widens that by two pixels, so "
        "it takes more than a hundred of them before one output pixel sees a whole "
        "224 x 224 image. The ViT's reach is global from its first layer; what it lacks "
        "is the convolution's built-in assumption that nearby pixels belong together, "
        "which it has to learn from data (a fresh position embedding knows nothing of "
        "which patches are neighbours, as chapter 2 showed)."
    ),
    reference=lambda: (_patch_gradients, _receptive_field),
    mistakes=[
        (lambda: (_patch_gradients_signed, _receptive_field), "signed values"),
        (lambda: (_patch_gradients_rows, _receptive_field), "mixes pixels"),
        (lambda: (_patch_gradients, lambda layers: 3 * layers), "one pixel on each"),
        (lambda: (_patch_gradients, lambda layers: 3**layers), "one pixel on each"),
    ],
)
