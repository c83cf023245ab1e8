"""Chapter 11's exercises: how many tokens the text tokenizer makes for each kernel size,
the token mask that padding leaves, and what freezing the word embedding leaves to train."""

from __future__ import annotations

import torch

from vitbook.book.exercises import Exercise, Mistake

__all__ = ["ex1", "ex2", "ex3"]


def _tokenizer(k: int):
    from going_modular.models.text_cct import TextTokenizer

    return TextTokenizer(8, 8, k, stride=max(1, k // 2 - 1), padding=max(1, k // 2))


# Exercise 1 ------------------------------------------------------------------------------


def _n_tokens(length: int, k: int) -> int:
    s, p = max(1, k // 2 - 1), max(1, k // 2)
    l1 = (length + 2 * p - k) // s + 1  # the convolution
    return (l1 + 2 * 1 - 2) // 2 + 1  # the max-pool: width 2, stride 2, padding 1


def _check_n_tokens(n_tokens) -> str:
    for k in (1, 2, 3, 4, 6):
        for length in (1, 7, 20, 64, 101):
            got, want = int(n_tokens(length, k)), _tokenizer(k).sequence_length(length)
            if got == want:
                continue
            s, p = max(1, k // 2 - 1), max(1, k // 2)
            l1 = (length + 2 * p - k) // s + 1
            if got == l1:
                raise Mistake(
                    f"{length} words, k = {k}: {got} is the number of convolution "
                    "outputs L1; the max-pool (width 2, stride 2, padding 1) then about "
                    f"halves it, to {want} tokens."
                )
            if got == ((length - k) // s + 1) // 2 + 1:
                raise Mistake(
                    f"{length} words, k = {k}: you left out the convolution's zero "
                    f"padding p = max(1, k // 2) = {p} at both ends; the tokenizer "
                    f"makes {want} tokens."
                )
            raise Mistake(
                f"{length} words, k = {k}: the tokenizer makes {want} tokens, you said "
                f"{got}. Stride s = max(1, k // 2 - 1), padding p = max(1, k // 2), "
                "L1 = (L + 2p - k) // s + 1, then N = L1 // 2 + 1."
            )
    return (
        "64 words give 34 tokens with k = 1 and 33 with k = 2 or 4: a wider kernel "
        "buys a wider view per token, not fewer tokens."
    )


ex1 = Exercise(
    title="Kernel size 1 vs 2 vs 4",
    checker=_check_n_tokens,
    hint_text=(
        "Two layers change the length: the convolution (kernel k, stride "
        "s = max(1, k // 2 - 1), zero padding p = max(1, k // 2) at both ends) gives "
        "L1 = (L + 2p - k) // s + 1 outputs, and the max-pool (width 2, stride 2, "
        "padding 1) gives (L1 + 2 - 2) // 2 + 1 tokens."
    ),
    solution_code="""
def n_tokens(L, k):
    s, p = max(1, k // 2 - 1), max(1, k // 2)
    L1 = (L + 2 * p - k) // s + 1  # the convolution
    return L1 // 2 + 1  # the max-pool: (L1 + 2 * 1 - 2) // 2 + 1


print({k: n_tokens(64, k) for k in (1, 2, 4)})  # {1: 34, 2: 33, 4: 33}
""",
    explanation=(
        "For the reference's kernels 1, 2 and 4 the stride is 1, so the convolution "
        "gives L + 2p - k + 1 outputs (L + 2 for k = 1, L + 1 for k = 2 and 4), and "
        "the max-pool halves them: 64 words become 34 tokens (k = 1) or 33 (k = 2 and 4). "
        "Each unit of kernel width adds 300 x 128 = 38,400 weights but no token, so a "
        "wider kernel only widens what each token reads (k + 1 words). Whether that pays "
        "is an empirical question: on the real AG News the reference's three CCT-2 "
        "kernels differ by at most 0.35 points (nlp/README.md at cd11f09), and comparing "
        "them here would need at least five seeds each."
    ),
    reference=lambda: (_n_tokens,),
    mistakes=(
        (
            lambda: (lambda L, k: (L + 2 * max(1, k // 2) - k) // 1 + 1,),
            "max-pool",
        ),
        (
            lambda: (lambda L, k: ((L - k) // max(1, k // 2 - 1) + 1) // 2 + 1,),
            "zero padding",
        ),
        (lambda: (lambda L, k: L // 2,), "the tokenizer makes"),
    ),
)


# Exercise 2 ------------------------------------------------------------------------------


def _token_mask(word_mask: torch.Tensor, k: int) -> torch.Tensor:
    return _tokenizer(k).token_mask(word_mask)


def _check_token_mask(token_mask) -> str:
    length = 20
    lengths = torch.tensor([[20], [11], [4], [1]])
    word_mask = torch.arange(length) < lengths  # (4, 20): 20, 11, 4 and 1 real words
    for k in (1, 2, 4):
        want = _token_mask(word_mask, k)
        got = token_mask(word_mask.clone(), k)
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            shape = getattr(got, "shape", None)
            raise Mistake(
                f"for a (4, {length}) word mask and k = {k} return a (4, "
                f"{want.shape[1]}) mask, one column per token of the padded batch; got "
                f"{tuple(shape) if shape is not None else type(got).__name__}."
            )
        if got.dtype != torch.bool:
            raise Mistake(
                f"return a boolean mask (True = real token), not {got.dtype}."
            )
        if bool(got.all()) and not bool(want.all()):
            raise Mistake(
                "every token is marked real: the tokens made from padding only must be "
                "False, or attention and SeqPool will read them."
            )
        for row in range(len(lengths)):
            if not torch.equal(got[row], want[row]):
                raise Mistake(
                    f"k = {k}, a sentence of {int(lengths[row])} words: it has "
                    f"{int(want[row].sum())} real tokens, the first ones, you marked "
                    f"{int(got[row].sum())}. Count the tokens the unpadded sentence "
                    "would give: N(l) = L1(l) // 2 + 1."
                )
    return (
        "the real tokens of each sentence are the first N(l), those of the sentence "
        "without its padding."
    )


ex2 = Exercise(
    title="The token mask",
    checker=_check_token_mask,
    hint_text=(
        "Real words come first, so a sentence is described by its length l = "
        "word_mask.sum(1, keepdim=True). The unpadded sentence has n_tokens(l, k) tokens "
        "(exercise 1), and the padded batch has n_tokens(L, k) columns for L = "
        "word_mask.shape[1]: compare torch.arange(n_tokens(L, k)) with each row's "
        "n_tokens(l, k)."
    ),
    solution_code="""
def token_mask(word_mask, k):
    s, p = max(1, k // 2 - 1), max(1, k // 2)

    def n_tokens(L):
        return ((L + 2 * p - k) // s + 1) // 2 + 1

    lengths = word_mask.sum(dim=1, keepdim=True)  # (B, 1) real words
    columns = torch.arange(n_tokens(word_mask.shape[1]))  # (N,)
    return columns < n_tokens(lengths)  # (B, N)
""",
    explanation=(
        "The convolution and the max-pool only ever look at neighbours, so the first "
        "N(l) tokens of a padded sentence are exactly the tokens of the unpadded one, "
        "once the padded embeddings and the convolution outputs past the end are "
        "zeroed (the masked tokenizer of the padding section). Every later token was "
        "made from padding alone and must be masked in attention and in SeqPool. Without "
        "that mask the logits change with the amount of padding, as the padding section "
        "measured; the package's TextTokenizer.token_mask computes this same mask."
    ),
    reference=lambda: (_token_mask,),
    mistakes=(
        (lambda: (lambda m, k: m[:, ::2],), "one column per token"),
        (
            lambda: (lambda m, k: torch.ones(m.shape[0], _token_mask(m, k).shape[1]),),
            "boolean",
        ),
        (
            lambda: (
                lambda m, k: torch.ones(m.shape[0], _token_mask(m, k).shape[1]).bool(),
            ),
            "every token is marked real",
        ),
        (
            lambda: (
                lambda m, k: (
                    torch.arange(_token_mask(m, k).shape[1])
                    < m.sum(1, keepdim=True) // 2
                ),
            ),
            "real tokens",
        ),
    ),
)


# Exercise 3 ------------------------------------------------------------------------------


def _small_text_cct():
    from going_modular.models.text_cct import text_cct_2

    torch.manual_seed(0)
    return text_cct_2(50, 3, kernel_size=2, seq_len=16, padding_idx=0)


def _freeze_embedding(model) -> int:
    model.embedding.weight.requires_grad_(False)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _check_freeze(freeze_embedding) -> str:
    model = _small_text_cct()
    got = freeze_embedding(model)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    if not trainable:
        raise Mistake(
            "you froze every parameter: freeze the embedding only, so that the "
            "tokenizer, the encoder, SeqPool and the classifier still train."
        )
    if "embedding.weight" in trainable:
        raise Mistake(
            "the embedding still requires a gradient: set "
            "model.embedding.weight.requires_grad_(False)."
        )
    everything = {n for n, _ in model.named_parameters()} - {"embedding.weight"}
    if trainable != everything:
        raise Mistake(
            "freeze the embedding only; these also stopped training: "
            + ", ".join(sorted(everything - trainable)[:3])
        )
    want = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if int(got) != want:
        raise Mistake(
            f"the model is frozen right, but return the number of trainable parameters "
            f"({want:,}), not {int(got):,}: count p.numel() where p.requires_grad."
        )
    return (
        "only the word vectors stopped training: what remains is the body of the "
        "model, the same count whatever the vocabulary."
    )


def _freeze_all(model) -> int:
    for p in model.parameters():
        p.requires_grad_(False)
    return 0


ex3 = Exercise(
    title="Freeze the embedding",
    checker=_check_freeze,
    hint_text=(
        "A TextCCT keeps its word vectors in model.embedding, an nn.Embedding whose only "
        "parameter is .weight. A parameter with requires_grad False gets no gradient, "
        "and AdamW skips parameters without one."
    ),
    solution_code="""
def freeze_embedding(model):
    model.embedding.weight.requires_grad_(False)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
""",
    explanation=(
        "Freezing takes the vocabulary-sized table out of training and leaves the body "
        "(tokenizer, encoder, SeqPool, classifier) to learn: for text CCT-2 with kernel "
        "1 that is the reference's 0.238M parameters whatever the vocabulary, which is "
        "why its README counts parameters without the embedding. "
        "TextCCT(embedding_weights=E, freeze_embedding=True) does the same through "
        "nn.Embedding.from_pretrained(E, freeze=True). Whether freezing helps is a "
        "question for at least five seeds per variant: with vectors derived from the "
        "same few thousand texts there is little reason to expect it, since they know "
        "nothing the training texts do not."
    ),
    reference=lambda: (_freeze_embedding,),
    mistakes=(
        (lambda: (_freeze_all,), "froze every parameter"),
        (
            lambda: (lambda m: sum(p.numel() for p in m.parameters()),),
            "still requires a gradient",
        ),
        (
            lambda: (
                lambda m: (
                    m.embedding.weight.requires_grad_(False),
                    sum(p.numel() for p in m.parameters()),
                )[1],
            ),
            "return the number of trainable parameters",
        ),
    ),
)
