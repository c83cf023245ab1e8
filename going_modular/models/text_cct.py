"""The Compact Convolutional Transformer for text (Hassani et al., 2021, section 4.3).

Word embeddings, a 1-D convolutional :class:`TextTokenizer`, and the image models' transformer
body (:class:`~going_modular.models.cct.TransformerClassifier` with SeqPool). Unlike the
authors' reference, the padding masks work: their tokenizer returns masks in a shape their
attention rejects, their SeqPool ignores them, and their text position tables have one row too
many (chapter 11 shows each of these). Here padding changes nothing: the logits of a padded
sequence equal those of the unpadded one.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from going_modular.models.cct import TransformerClassifier
from going_modular.models.checks import check_sizes
from going_modular.models.layers import collect_attention

__all__ = ["TextCCT", "TextTokenizer", "text_cct_2"]


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

    def _conv_length(self, length: torch.Tensor | int) -> torch.Tensor | int:
        conv = self.conv_layers[0]
        return (length + 2 * conv.padding[0] - conv.kernel_size[0]) // conv.stride[
            0
        ] + 1

    def _pool_length(self, length: torch.Tensor | int) -> torch.Tensor | int:
        pool = self.conv_layers[2]
        return (length + 2 * pool.padding - pool.kernel_size) // pool.stride + 1

    def sequence_length(self, seq_len: int) -> int:
        """Number of tokens N for ``seq_len`` words."""
        return self._pool_length(self._conv_length(seq_len))

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(B, L, E) embeddings and optional (B, L) mask -> (B, N, dim) tokens and (B, N) mask."""
        conv, relu, pool = self.conv_layers
        if mask is None:
            return pool(relu(conv(x.transpose(1, 2)))).transpose(1, 2), None
        lengths = mask.sum(dim=1, keepdim=True)  # (B, 1) real words per sequence
        x = relu(conv((x * mask.unsqueeze(-1)).transpose(1, 2)))  # (B, dim, L1)
        positions = torch.arange(x.shape[-1], device=x.device)
        x = pool(x * (positions < self._conv_length(lengths))[:, None])
        token_lengths = self._pool_length(self._conv_length(lengths))
        token_mask = torch.arange(x.shape[-1], device=x.device) < token_lengths
        return (x * token_mask[:, None]).transpose(1, 2), token_mask


class TextCCT(TransformerClassifier):
    """CCT for text classification: word embedding, :class:`TextTokenizer`, transformer, SeqPool.

    ``forward(token_ids, mask)`` takes (B, L) token ids with L <= ``seq_len`` and an optional
    (B, L) padding mask, True for real tokens, padding at the end. The mask is applied to the
    embeddings, in every attention layer as a key-padding mask, and in SeqPool; without a mask
    every position is a real token. ``embedding_weights`` (vocab_size, word_embedding_dim), e.g.
    GloVe vectors, initialise the word embedding; ``freeze_embedding`` keeps it fixed. Other
    keywords (``drop_rate``, ``attn_drop_rate``, ``drop_path_rate``) go to the transformer body.
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
        if embedding_weights is None:
            embedding = nn.Embedding(
                vocab_size, word_embedding_dim, padding_idx=padding_idx
            )
            embedding.weight.requires_grad_(not freeze_embedding)
        else:
            if tuple(embedding_weights.shape) != (vocab_size, word_embedding_dim):
                raise ValueError(
                    f"embedding_weights has shape {tuple(embedding_weights.shape)}, expected "
                    f"(vocab_size, word_embedding_dim) = ({vocab_size}, {word_embedding_dim})."
                )
            embedding = nn.Embedding.from_pretrained(
                embedding_weights, freeze=freeze_embedding, padding_idx=padding_idx
            )
        tokenizer = TextTokenizer(
            word_embedding_dim,
            dim,
            kernel_size,
            stride=max(1, kernel_size // 2 - 1) if stride is None else stride,
            padding=max(1, kernel_size // 2) if padding is None else padding,
            pooling_kernel_size=pooling_kernel_size,
            pooling_stride=pooling_stride,
            pooling_padding=pooling_padding,
        )
        tokens = tokenizer.sequence_length(seq_len)
        if tokens < 1:
            raise ValueError(
                f"seq_len={seq_len} leaves no tokens after the convolution and pooling: "
                "use longer sequences or a smaller kernel_size or pooling."
            )
        super().__init__(
            tokenizer,
            tokens,
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

    def _tokens(
        self, token_ids: torch.Tensor, mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if token_ids.ndim != 2 or token_ids.shape[1] > self.seq_len:
            raise ValueError(
                f"Expected token ids of shape (B, L) with L <= seq_len={self.seq_len}, got "
                f"{tuple(token_ids.shape)}."
            )
        if mask is not None:
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
        return self.tokenizer(self.embedding(token_ids), mask)

    def forward(
        self,
        token_ids: torch.Tensor,
        mask: torch.Tensor | None = None,
        return_pool_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """(B, L) token ids and optional (B, L) mask -> logits (B, num_classes); with
        ``return_pool_weights`` also SeqPool's (B, N) weights over the conv tokens."""
        tokens, mask = self._tokens(token_ids, mask)
        return self.forward_tokens(tokens, mask, return_pool_weights)

    def get_attention_maps(
        self, token_ids: torch.Tensor, mask: torch.Tensor | None = None
    ) -> list[torch.Tensor]:
        """One (B, heads, N, N) attention tensor per block, computed in eval mode."""
        return collect_attention(self, token_ids, mask)


def text_cct_2(
    vocab_size: int,
    num_classes: int,
    kernel_size: int = 2,
    seq_len: int = 64,
    **kwargs: Any,
) -> TextCCT:
    """The paper's text CCT-2: 2 layers, dim 128, 2 heads, MLP ratio 1, 300-wide word
    embeddings (the reference uses kernel 1, 2 or 4); other keywords go to :class:`TextCCT`."""
    sizes = dict(dim=128, depth=2, heads=2, mlp_ratio=1.0)
    return TextCCT(
        vocab_size,
        num_classes,
        kernel_size=kernel_size,
        seq_len=seq_len,
        **(sizes | kwargs),
    )
