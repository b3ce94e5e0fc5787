"""The memory estimate that refuses widths that cannot fit, before anything is allocated."""

from __future__ import annotations

import re

import pytest

from workloads.errors import WorkloadError
from workloads.style import memory


def test_activation_floats_per_pixel_by_hand() -> None:
    # block1 64+64, pool 64/4; block2 2·128/4, pool 128/16; block3 4·256/16, pool 256/64;
    # block4 4·512/64, pool 512/256; block5 2·512/256
    assert memory.floats_per_pixel() == 128 + 16 + 64 + 8 + 64 + 4 + 32 + 2 + 4


def test_weight_bytes_cover_the_convolutions_up_to_block5_conv2() -> None:
    assert memory.weight_bytes() == 15_304_768 * 4


def test_estimate_grows_with_the_pixels() -> None:
    small = memory.estimate_bytes(384, 512, 512 * 512)
    large = memory.estimate_bytes(768, 1024, 1024 * 1024)
    fixed = memory.weight_bytes() + memory.FIXED_OVERHEAD_BYTES
    assert (large - fixed) == pytest.approx(4 * (small - fixed), rel=1e-6)


def test_too_wide_is_refused_with_the_largest_width_that_fits() -> None:
    budget = memory.Budget(free_bytes=4 * 2**30, device="GPU 0 (test)")
    with pytest.raises(WorkloadError) as info:
        memory.check_fits(3000, 4000, 4000 * 4000, budget)
    message = info.value.one_line()
    assert "GPU 0 (test) has 4.0 GiB free" in message and "needs about" in message
    fits = int(re.search(r"--width (\d+)", message).group(1))  # type: ignore[union-attr]
    assert 0 < fits < 4000
    memory.check_fits(round(fits * 0.75), fits, fits * fits, budget)  # the suggestion fits
    with pytest.raises(WorkloadError):
        grown = fits + 20
        memory.check_fits(round(grown * 0.75), grown, grown * grown, budget)


def test_host_budget_is_read_from_meminfo() -> None:
    budget = memory.host_available_bytes()
    assert budget.free_bytes > 0 and budget.device == "host memory"
