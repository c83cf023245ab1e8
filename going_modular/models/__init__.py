"""The models the book builds, each buildable by name with :func:`build_model`.

=================  =============================================================================
module             contents
=================  =============================================================================
``layers``         :class:`~.layers.Attention`, :class:`~.layers.Mlp`, :class:`~.layers.Block`,
                   ``DropPath``, ``record_attention``, ``explicit_attention``,
                   ``conv_output_size``, ``sinusoidal_embedding``
``vit``            the paper's ViT (``vit_b_16``, ``vit_l_16``, ``vit_h_14``, ``vit_4_16``,
                   ``vit_cifar_p2``)
``cct``            ViT-Lite, CVT, CCT for images (``CompactTransformer``, ``CompactBlock``;
                   ``vit_lite_7_4``, ``cvt_7_4``, ``cct_7_3x1``, ...)
``text_cct``       the text CCT (``TextCCT``, ``text_cct_2``, ``text_cct_4``, ``text_cct_6``;
                   not registered: they read token ids)
``vitbn``          the BatchNorm ViTs of chapter 12 (``vitbn_vit``, ``vitbn_ffn``, ``vitbn``)
``tinyvgg``        the CNN of chapter 0
``checks``         the argument checks the models share
``registry``       ``build_model``, ``list_models``, ``register_model``
=================  =============================================================================

Every model and factory names its arguments with one vocabulary:

* ``img_size``, ``patch_size``, ``in_channels``, ``num_classes``: the data and the patches;
* ``dim`` (the token width D), ``depth`` (blocks), ``heads``, ``head_dim`` (features per head,
  ``dim // heads`` unless given), ``mlp_ratio`` (MLP width / ``dim``, a float: ViT-B
  3072 / 768 = 4.0), ``qkv_bias``;
* ``drop_rate`` (dropout after the attention's output projection and the MLP's Linears),
  ``attn_drop_rate`` (on the attention weights), ``drop_path_rate`` (stochastic depth),
  ``pos_drop_rate`` (on the embedded tokens, after the position embedding);
* ``stem_channels``: the width of a convolutional stem (the hybrid ViT's, CCT's tokenizer);
* ``pos_embed`` (``"learnable"``, ``"sine"``, ``"none"``) and ``pool`` (``"cls"``, ``"seq"``
  for SeqPool, ``"mean"``), where a family offers a choice.

And the parts of every transformer have the same names (timm's): ``patch_embed`` or
``tokenizer``, ``cls_token``, ``pos_embed``, ``pos_drop``, ``blocks`` (each ``norm1``,
``attn``, ``norm2``, ``mlp``), ``norm`` and ``head``, the classifier; and their methods are
timm's: ``forward(x) = forward_head(forward_features(x))``, ``forward_features`` ending with the
final norm.
"""

from going_modular.models import (
    cct_variants,  # noqa: F401  (registers the CCT, CVT and ViT-Lite factories)
    tinyvgg,  # noqa: F401  (registers its factory)
    vit,  # noqa: F401  (registers its factories)
    vitbn,  # noqa: F401  (registers its factories)
)
from going_modular.models.registry import build_model, list_models, register_model

__all__ = ["build_model", "list_models", "register_model"]
