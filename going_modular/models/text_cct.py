"""The Compact Convolutional Transformer for text (Hassani et al., 2021, section 4.3).

Word embeddings, a 1-D convolutional :class:`TextTokenizer`, and the image models' transformer
body (:class:`~going_modular.models.cct.CompactTransformer` with SeqPool). Unlike the
authors' reference, the padding masks work: their tokenizer returns masks in a shape their
attention rejects, their SeqPool ignores them, and their text position tables have one row too
many (chapter 11 shows each of these). Here padding changes nothing: the logits of a padded
sequence equal those of the unpadded one.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from going_modular.models.cct import CompactTransformer
from going_modular.models.cct_variants import SIZES, reference_stride_padding
from going_modular.models.checks import check_sizes
from going_modular.models.layers import IntOrTensor, conv_output_size

__all__ = ["TextCCT", "TextTokenizer", "text_cct_2", "text_cct_4", "text_cct_6"]


class TextTokenizer(nn.Module):
    """Word embeddings (B, L, E) -> tokens (B, N, dim): Conv1d over the sequence, ReLU, max-pool.

    With a padding ``mask`` (B, L) (True = real token, padding at the end) the output mask
    (B, N) marks exactly the tokens the unpadded sequence would produce, and every other token
    is zeroed, so padding cannot leak into real tokens: padded embeddings are zeroed before the
    conv (as its own zero padding would be), and conv outputs past the real length are zeroed
    before pooling (equivalent to the pool's -inf padding, because ReLU outputs are >= 0).
    """

    def __init__(
        self,
        word_embedding_dim: int,
        dim: int,
        kernel_size: int,
        stride: int,
        padding: int,
        pooling_kernel_size: int = 2,
        pooling_stride: int = 2,
        pooling_padding: int = 1,
    ):
        super().__init__()
        check_sizes(
            word_embedding_dim=word_embedding_dim,
            dim=dim,
            kernel_size=kernel_size,
            stride=stride,
            pooling_kernel_size=pooling_kernel_size,
            pooling_stride=pooling_stride,
        )
        check_sizes(0, padding=padding, pooling_padding=pooling_padding)
        self.conv_layers = nn.Sequential(
            nn.Conv1d(
                word_embedding_dim, dim, kernel_size, stride, padding, bias=False
            ),
            nn.ReLU(),
            nn.MaxPool1d(pooling_kernel_size, pooling_stride, pooling_padding),
        )
        nn.init.kaiming_normal_(self.conv_layers[0].weight)

    def _conv_length(self, length: IntOrTensor) -> IntOrTensor:
        conv = self.conv_layers[0]
        return conv_output_size(
            length, conv.kernel_size[0], conv.stride[0], conv.padding[0]
        )

    def sequence_length(self, seq_len: IntOrTensor) -> IntOrTensor:
        """Number of tokens N for ``seq_len`` words (an int or a tensor of lengths)."""
        pool = self.conv_layers[2]
        return conv_output_size(
            self._conv_length(seq_len), pool.kernel_size, pool.stride, pool.padding
        )

    def num_tokens(self, seq_len: int) -> int:
        """Number of tokens N for sequences of ``seq_len`` words; ValueError if none."""
        tokens = self.sequence_length(seq_len)
        if tokens < 1:
            raise ValueError(
                f"seq_len={seq_len} leaves no tokens after the convolution and pooling: "
                "use longer sequences or a smaller kernel_size or pooling."
            )
        return tokens

    def token_mask(self, mask: torch.Tensor | None) -> torch.Tensor | None:
        """(B, L) padding mask of the words -> (B, N) mask of the tokens they give."""
        if mask is None:
            return None
        lengths = mask.sum(dim=1, keepdim=True)  # (B, 1) real words per sequence
        tokens = torch.arange(self.sequence_length(mask.shape[1]), device=mask.device)
        return tokens < self.sequence_length(lengths)  # (B, N)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(B, L, E) embeddings and optional (B, L) mask -> (B, N, dim) tokens and (B, N) mask."""
        conv, relu, pool = self.conv_layers
        if mask is None:
            # (B, L, E) -> (B, E, L) -> (B, dim, N) -> (B, N, dim)
            return pool(relu(conv(x.transpose(1, 2)))).transpose(1, 2), None
        lengths = mask.sum(dim=1, keepdim=True)  # (B, 1) real words per sequence
        x = relu(conv((x * mask.unsqueeze(-1)).transpose(1, 2)))  # (B, dim, L1)
        positions = torch.arange(x.shape[-1], device=x.device)
        x = pool(x * (positions < self._conv_length(lengths))[:, None])  # (B, dim, N)
        token_mask = self.token_mask(mask)
        return (x * token_mask[:, None]).transpose(1, 2), token_mask  # (B, N, dim)


class TextCCT(CompactTransformer):
    """CCT for text classification: word embedding, :class:`TextTokenizer`, transformer, SeqPool.

    ``forward(token_ids, mask)`` takes (B, L) token ids with L <= ``seq_len`` and an optional
    (B, L) padding mask, True for real tokens, padding at the end. The mask is applied to the
    embeddings, in every attention layer as a key-padding mask, and in SeqPool; without a mask
    every position is a real token. ``embedding_weights`` (vocab_size, word_embedding_dim), e.g.
    GloVe vectors, initialise the word embedding; ``freeze_embedding`` keeps it fixed. Other
    keywords (``drop_rate``, ``attn_drop_rate``, ``drop_path_rate``, ``pos_drop_rate``) go to
    the transformer body. ``pool_weights(token_ids, mask)`` gives SeqPool's (B, N) weights
    over the conv tokens.
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        *,
        seq_len: int = 64,
        word_embedding_dim: int = 300,
        dim: int = 128,
        depth: int = 2,
        heads: int = 2,
        mlp_ratio: float = 1.0,
        kernel_size: int = 2,
        stride: int | None = None,
        padding: int | None = None,
        pooling_kernel_size: int = 2,
        pooling_stride: int = 2,
        pooling_padding: int = 1,
        pos_embed: str = "sine",
        padding_idx: int | None = 1,
        embedding_weights: torch.Tensor | None = None,
        freeze_embedding: bool = False,
        **kwargs: Any,
    ):
        check_sizes(
            vocab_size=vocab_size,
            num_classes=num_classes,
            seq_len=seq_len,
            word_embedding_dim=word_embedding_dim,
        )
        embedding = _word_embedding(
            vocab_size,
            word_embedding_dim,
            padding_idx,
            embedding_weights,
            freeze_embedding,
        )
        tokenizer = TextTokenizer(
            word_embedding_dim,
            dim,
            kernel_size,
            *reference_stride_padding(kernel_size, stride, padding),
            pooling_kernel_size=pooling_kernel_size,
            pooling_stride=pooling_stride,
            pooling_padding=pooling_padding,
        )
        super().__init__(
            tokenizer,
            num_tokens=tokenizer.num_tokens(seq_len),
            pool="seq",
            num_classes=num_classes,
            dim=dim,
            depth=depth,
            heads=heads,
            mlp_ratio=mlp_ratio,
            pos_embed=pos_embed,
            **kwargs,
        )
        self.embedding = embedding
        self.seq_len = seq_len

    def tokenize(
        self, token_ids: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(B, L) token ids and optional (B, L) mask -> (B, N, dim) tokens and (B, N) mask."""
        if token_ids.ndim != 2 or token_ids.shape[1] > self.seq_len:
            raise ValueError(
                f"Expected token ids of shape (B, L) with L <= seq_len={self.seq_len}, got "
                f"{tuple(token_ids.shape)}."
            )
        if mask is not None:
            _check_padding_mask(mask, token_ids)
            mask = mask.bool()
        return self.tokenizer(self.embedding(token_ids), mask)

    def forward(
        self, token_ids: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, L) token ids and optional (B, L) mask -> logits (B, num_classes)."""
        x = self.forward_features(token_ids, mask)
        token_mask = None if mask is None else self.tokenizer.token_mask(mask.bool())
        return self.forward_head(x, token_mask)


def _word_embedding(
    vocab_size: int,
    word_embedding_dim: int,
    padding_idx: int | None,
    weights: torch.Tensor | None,
    freeze: bool,
) -> nn.Embedding:
    """A new (vocab_size, word_embedding_dim) embedding, or one holding ``weights``."""
    if weights is None:
        embedding = nn.Embedding(
            vocab_size, word_embedding_dim, padding_idx=padding_idx
        )
        embedding.weight.requires_grad_(not freeze)
        return embedding
    if tuple(weights.shape) != (vocab_size, word_embedding_dim):
        raise ValueError(
            f"embedding_weights has shape {tuple(weights.shape)}, expected "
            f"(vocab_size, word_embedding_dim) = ({vocab_size}, {word_embedding_dim})."
        )
    return nn.Embedding.from_pretrained(weights, freeze=freeze, padding_idx=padding_idx)


def _check_padding_mask(mask: torch.Tensor, token_ids: torch.Tensor) -> None:
    if mask.shape != token_ids.shape:
        raise ValueError(
            f"mask shape {tuple(mask.shape)} differs from token_ids "
            f"{tuple(token_ids.shape)}."
        )
    mask = mask.bool()
    if (mask[:, 1:] & ~mask[:, :-1]).any():
        raise ValueError(
            "mask must be right-padded: True for the real tokens, then False."
        )
    if not mask[:, 0].all():
        raise ValueError(
            "Every sequence needs at least one real token (mask[:, 0] True)."
        )


# Factories (not registered: the models read token ids) -----------------------------------------
# SHI-Labs/Compact-Transformers' src/text/cct.py defines text_cct_2, text_cct_4 and text_cct_6
# with the sizes of the image CCT-2, CCT-4 and CCT-6 (cct_variants.SIZES) and 300-wide word embeddings.


def text_cct_2(
    vocab_size: int,
    num_classes: int,
    kernel_size: int = 2,
    seq_len: int = 64,
    **kwargs: Any,
) -> TextCCT:
    """The paper's text CCT-2: 2 layers, dim 128, 2 heads, MLP ratio 1, 300-wide word
    embeddings (the reference uses kernel 1, 2 or 4); other keywords go to :class:`TextCCT`.
    As ``text_cct_2`` of SHI-Labs/Compact-Transformers' ``src/text/cct.py``."""
    return TextCCT(
        vocab_size,
        num_classes,
        kernel_size=kernel_size,
        seq_len=seq_len,
        **(SIZES[2] | kwargs),
    )


def text_cct_4(
    vocab_size: int,
    num_classes: int,
    kernel_size: int = 2,
    seq_len: int = 64,
    **kwargs: Any,
) -> TextCCT:
    """The paper's text CCT-4: 4 layers, dim 128, 2 heads, MLP ratio 1, 300-wide word
    embeddings, as ``text_cct_4`` of SHI-Labs/Compact-Transformers' ``src/text/cct.py``;
    other keywords go to :class:`TextCCT`."""
    return TextCCT(
        vocab_size,
        num_classes,
        kernel_size=kernel_size,
        seq_len=seq_len,
        **(SIZES[4] | kwargs),
    )


def text_cct_6(
    vocab_size: int,
    num_classes: int,
    kernel_size: int = 2,
    seq_len: int = 64,
    **kwargs: Any,
) -> TextCCT:
    """The paper's text CCT-6: 6 layers, dim 256, 4 heads, MLP ratio 2, 300-wide word
    embeddings, as ``text_cct_6`` of SHI-Labs/Compact-Transformers' ``src/text/cct.py``;
    other keywords go to :class:`TextCCT`."""
    return TextCCT(
        vocab_size,
        num_classes,
        kernel_size=kernel_size,
        seq_len=seq_len,
        **(SIZES[6] | kwargs),
    )
