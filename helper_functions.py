"""Every name the chapters import, in one place: ``from helper_functions import ...``.

Each is defined once, in the ``going_modular`` module it is imported from below, under the
same name (tests/test_package.py checks both, and that every chapter imports from here
only). The package's modules are where to read, test and reuse the code; this file is
the one list a reader of the chapters needs.
"""

from going_modular.book.attention_maps import (
    class_token_attention,
    mean_attention_distance,
    overlay,
    patch_distances,
    plot_attention_distance,
    plot_position_similarity,
    position_embedding_similarity,
    rollout_class_map,
    similarity_mosaic,
)
from going_modular.book.diagrams import draw_encoder_block, draw_vit_overview
from going_modular.book.glue import glue
from going_modular.book.reference import agree, randomize_vectors_
from going_modular.book.settings import (
    STEP_OVERHEAD_S,
    T4_FP16_PEAK,
    Work,
    cap,
    checkpoint_root,
    claim,
    describe_setting,
    gpu_plan,
    is_dry_run,
    is_offline,
    is_quick,
    pick,
    run_dir,
    run_report,
    uses_fixtures,
)
from going_modular.book.style import figsize, show_images, table, use_book_style
from going_modular.data.augment import (
    CIFAR10_MEAN,
    CIFAR10_STD,
    MixUpCutMix,
    TransformedDataset,
    cifar_test_transform,
    random_flip_batch,
)
from going_modular.data.datasets import (
    FASHION_MNIST_CLASSES,
    FASHION_MNIST_MEAN,
    FASHION_MNIST_STD,
    fashion_mnist_tensors,
    get_cifar10,
    get_fashion_mnist,
    get_food_data,
    get_mnist,
)
from going_modular.data.download import DownloadError
from going_modular.data.gpu_augment import DeviceLoader, recipe_augment, to_uint8_images
from going_modular.data.paths import project_root
from going_modular.data.text_data import (
    PAD_ID,
    UNK_ID,
    Vocabulary,
    WithPaddingMask,
    encode,
    text_dataloaders,
    tokenize,
)
from going_modular.data.text_datasets import get_ag_news, get_glove, get_trec
from going_modular.data_setup import create_dataloaders, walk_through_dir
from going_modular.models.cct import (
    CompactTransformer,
    SeqPool,
    Tokenizer,
    ViTLite,
)
from going_modular.models.complexity import count_macs, count_params, fvcore_flops
from going_modular.models.convert import (
    TORCH_LAYER_KEYS,
    load_encoder_layer,
    load_renamed,
    load_torchvision_weights,
    rename_keys,
)
from going_modular.models.layers import (
    Attention,
    Block,
    Mlp,
    record_attention,
    sinusoidal_embedding,
)
from going_modular.models.pretrained import (
    create_vit_feature_extractor,
    load_pretrained_vit_b_16,
)
from going_modular.models.registry import build_model
from going_modular.models.text_cct import TextTokenizer, text_cct_2
from going_modular.models.vit import PatchEmbedding, vit_b_16
from going_modular.models.vitbn import (
    TokenBatchNorm,
    Transformer,
    ViTBN,
    ViTBNFFN,
    ViTLN,
)
from going_modular.predictions import plot_prediction_grid
from going_modular.training.cct_recipes import CCT_CIFAR_200, CCT_CIFAR_300
from going_modular.training.experiments import (
    balanced_subset,
    format_mean_std,
    over_seeds,
    step_loader,
    summarize,
    tensor_loaders,
)
from going_modular.training.loop import evaluate, fit
from going_modular.training.model_files import load_model, save_model
from going_modular.training.optim import param_groups_weight_decay
from going_modular.training.plots import compare_runs, plot_loss_curves, tensor_to_image
from going_modular.training.recipe import Recipe, learning_rates
from going_modular.training.seeding import get_device, set_seeds
from going_modular.training.timing import images_per_second
from going_modular.training.tracking import (
    fit_logged,
    metric_histories,
    read_runs,
    start_run,
    ui_command,
)
from going_modular.utils import prefer_channels_last

__all__ = [
    "agree",
    "Attention",
    "balanced_subset",
    "Block",
    "build_model",
    "cap",
    "CCT_CIFAR_200",
    "CCT_CIFAR_300",
    "checkpoint_root",
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "cifar_test_transform",
    "claim",
    "class_token_attention",
    "CompactTransformer",
    "compare_runs",
    "count_macs",
    "count_params",
    "create_dataloaders",
    "create_vit_feature_extractor",
    "describe_setting",
    "DeviceLoader",
    "DownloadError",
    "draw_encoder_block",
    "draw_vit_overview",
    "encode",
    "evaluate",
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_MEAN",
    "FASHION_MNIST_STD",
    "fashion_mnist_tensors",
    "figsize",
    "fit",
    "fit_logged",
    "format_mean_std",
    "fvcore_flops",
    "get_ag_news",
    "get_cifar10",
    "get_device",
    "get_fashion_mnist",
    "get_food_data",
    "get_glove",
    "get_mnist",
    "get_trec",
    "glue",
    "gpu_plan",
    "images_per_second",
    "is_dry_run",
    "is_offline",
    "is_quick",
    "learning_rates",
    "load_encoder_layer",
    "load_model",
    "load_pretrained_vit_b_16",
    "load_renamed",
    "load_torchvision_weights",
    "mean_attention_distance",
    "metric_histories",
    "MixUpCutMix",
    "Mlp",
    "over_seeds",
    "overlay",
    "PAD_ID",
    "param_groups_weight_decay",
    "patch_distances",
    "PatchEmbedding",
    "pick",
    "plot_attention_distance",
    "plot_loss_curves",
    "plot_position_similarity",
    "plot_prediction_grid",
    "position_embedding_similarity",
    "prefer_channels_last",
    "project_root",
    "random_flip_batch",
    "randomize_vectors_",
    "read_runs",
    "Recipe",
    "recipe_augment",
    "record_attention",
    "rename_keys",
    "rollout_class_map",
    "run_dir",
    "run_report",
    "save_model",
    "SeqPool",
    "set_seeds",
    "show_images",
    "similarity_mosaic",
    "sinusoidal_embedding",
    "start_run",
    "step_loader",
    "STEP_OVERHEAD_S",
    "summarize",
    "T4_FP16_PEAK",
    "table",
    "tensor_loaders",
    "tensor_to_image",
    "text_cct_2",
    "text_dataloaders",
    "TextTokenizer",
    "to_uint8_images",
    "TokenBatchNorm",
    "tokenize",
    "Tokenizer",
    "TORCH_LAYER_KEYS",
    "TransformedDataset",
    "Transformer",
    "ui_command",
    "UNK_ID",
    "use_book_style",
    "uses_fixtures",
    "vit_b_16",
    "ViTBN",
    "ViTBNFFN",
    "ViTLite",
    "ViTLN",
    "Vocabulary",
    "walk_through_dir",
    "WithPaddingMask",
    "Work",
]
