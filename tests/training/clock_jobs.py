"""Jobs for side_by_side's tests: functions a spawned process can import."""

from __future__ import annotations

import os
import time

import torch

__all__ = ["fail", "nap", "whoami"]


def whoami(value: int) -> tuple[int, int, int]:
    """This process's id, its torch threads, and twice ``value``."""
    return os.getpid(), torch.get_num_threads(), 2 * value


def fail(message: str) -> None:
    raise ValueError(message)


def nap(seconds: float) -> tuple[float, float]:
    """Sleep ``seconds``; the wall-clock times it started and ended."""
    start = time.time()
    time.sleep(seconds)
    return start, time.time()
