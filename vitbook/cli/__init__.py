"""The command line's parts below :mod:`vitbook.train`, one subject each.

``cli.options``     the parser, its number checks and :func:`configure`: the one module
                    that sees the parsed options
``cli.config``      :class:`RunConfig`, the checked options every step below receives
``cli.errors``      what ends a run, and how: :class:`UsageError` and the run's failures
``cli.output_dir``  the ``--output-dir``: refused early when unusable, locked for a run
``cli.resume``      what a ``--resume`` continues: read and checked to be the run's own
``cli.parts``       the data, the model and the recipe a config asks for
``cli.ranks``       under torchrun: what rank 0 does for the others, who speaks
``cli.stops``       a stop or a failure: what is kept, and the one line said
"""

from vitbook.cli.config import RunConfig, gpu_augment_applies
from vitbook.cli.errors import UsageError
from vitbook.cli.options import (
    DATASETS,
    FASHION_INPUTS,
    PLAIN_DEFAULTS,
    RESUME_MAY_CHANGE,
    build_parser,
    check_options,
    configure,
    input_candidates,
    options_given,
    resolve_recipe,
    resume_from,
)
from vitbook.cli.output_dir import locked_output_dir
from vitbook.cli.resume import Resumed

__all__ = [
    "DATASETS",
    "FASHION_INPUTS",
    "PLAIN_DEFAULTS",
    "RESUME_MAY_CHANGE",
    "Resumed",
    "RunConfig",
    "UsageError",
    "build_parser",
    "check_options",
    "configure",
    "gpu_augment_applies",
    "input_candidates",
    "locked_output_dir",
    "options_given",
    "resolve_recipe",
    "resume_from",
]
