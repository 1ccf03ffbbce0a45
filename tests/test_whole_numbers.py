"""Counts and indices are read as whole numbers (an adversary's review): ``int()`` truncated the
float division the exercises warn of ((n + block - 1) / block = 4.90 read as 4... or 5 with a nudge)
and read strings, so such answers scored "correct"."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gemm_kernels.lab.exercises._core import whole
from gemm_kernels.lab.exercises.moe_grouped_mm import check_padded_rows
from gemm_kernels.lab.exercises.persistent_tma import check_waves_and_tail
from gemm_kernels.lab.exercises.start_here import check_launch_stats


@pytest.mark.parametrize("value, expected", [(5, 5), (5.0, 5), (np.int64(3), 3), (torch.tensor(4), 4),
                                             (torch.tensor([2]), 2), (True, 1), (np.float32(3.0), 3),
                                             (np.array(4), 4), (np.array([4]), 4), (np.array([[4.0]]), 4)])
def test_whole_numbers_are_read(value, expected):
    assert whole(value) == expected and type(whole(value)) is int


@pytest.mark.parametrize("value", [4.9, "5", torch.tensor(4.5), np.float64(2.5), None, [1], torch.tensor([1, 2]),
                                   float("nan"), float("inf"), np.array([1, 2]), np.array(2.5),
                                   np.array(["5"])])
def test_anything_else_is_refused(value):
    with pytest.raises((ValueError, TypeError)):
        whole(value)


LAUNCH_STATS_FORGED = {
    "float division": lambda n, block: ((n + block - 1) / block, -n % block),
    "strings": lambda n, block: (str(-(-n // block)), str(-n % block)),
    "nudged floats": lambda n, block: torch.tensor([n / block + 0.9999, -n % block + 0.5]),
}


@pytest.mark.parametrize("name", list(LAUNCH_STATS_FORGED))
def test_launch_stats_answers_that_int_would_round_are_wrong(name):
    result = check_launch_stats(LAUNCH_STATS_FORGED[name])
    text = " ".join([result.message, *result.details])
    assert result.status == "wrong" and "whole numbers" in text, text


def test_right_answers_in_other_integer_types_still_pass():
    assert check_launch_stats(lambda n, block: (np.int64(-(-n // block)), float(-n % block))).status == "correct"
    assert check_launch_stats(lambda n, block: (math.ceil(n / block), -n % block)).status == "correct"


def test_a_right_answer_as_numpy_arrays_passes():
    """An adversary's review: one-element numpy arrays were refused where one-element tensors passed."""
    def launch_stats(n, block):
        programs = np.array(-(-n // block))
        return programs, programs * block - n
    assert check_launch_stats(launch_stats).status == "correct"


def test_other_counting_exercises_refuse_fractions():
    assert check_waves_and_tail(lambda M, N, bm, bn, sms: (math.ceil(M / bm) * math.ceil(N / bn) / sms, 0)).status == "wrong"
    assert check_padded_rows(lambda counts, bm: sum(counts) + 0.5).status == "wrong"
