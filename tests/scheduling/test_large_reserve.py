"""The large-job reserve's rule (migslice.scheduling.reserve)."""

from __future__ import annotations

import pytest

from migslice.inventory import mig_resource
from migslice.mig import WHOLE_GPU_RESOURCE
from migslice.scheduling.demand import DemandUnit, PodDemand, UnitKind
from migslice.scheduling.reserve import (
    DEFAULT_MAX_HOLD_S,
    NO_ARRIVALS,
    ArrivalMix,
    LargeReserve,
    device_sizes,
    is_large,
)


def test_a_pod_is_large_when_it_needs_a_whole_gpu_or_more_than_one_device() -> None:
    assert is_large([(7, 7)])  # 7g on an A100
    assert is_large([(4, 4)])  # 4g on an A30: its whole GPU
    assert is_large([(1, 7), (1, 7)])  # two devices
    assert not is_large([(4, 7)])
    assert not is_large([(3, 7)])
    assert not is_large([])


def test_the_share_is_what_large_pods_brought_of_the_compute_slices_arrived() -> None:
    mix = NO_ARRIVALS.add(7, True, 0.0).add(1, False, 0.0).add(3, False, 0.0).add(3, False, 0.0)
    assert mix.share == pytest.approx(7 / 14)
    assert NO_ARRIVALS.share == 0.0


def test_arrivals_fade_with_the_half_life() -> None:
    mix = ArrivalMix(half_life_s=100.0).add(7, True, 0.0).add(7, False, 100.0)
    # the large pod counts half by the time the small one arrives
    assert mix.share == pytest.approx(3.5 / 10.5)
    # an arrival stamped before the tally's time counts as arriving now
    late = mix.add(7, True, 50.0)
    assert late.at == 100.0
    assert late.share == pytest.approx(10.5 / 17.5)


def test_a_small_pod_may_not_break_an_idle_gpu_the_reserve_keeps() -> None:
    # a third of what arrives is large; 12 GPUs' worth free: 4 idle GPUs are kept
    reserve = LargeReserve(idle_gpus=5, free_gpus=12.0, share=1 / 3)
    assert reserve.kept == pytest.approx(4.0)
    assert not reserve.holds_back(0)  # beside other pods: always
    assert not reserve.holds_back(1)  # 4 idle GPUs left: the reserve holds
    assert LargeReserve(4, 12.0, 1 / 3).holds_back(1)  # 3 left: below it
    assert LargeReserve(6, 12.0, 1 / 3).holds_back(3)


def test_a_small_pod_held_back_max_hold_may_break_an_idle_gpu() -> None:
    reserve = LargeReserve(4, 12.0, 1 / 3, max_hold_s=60.0)  # keeps 4: 3 left would be below
    assert reserve.holds_back(1, waited_s=0.0)
    assert reserve.holds_back(1, waited_s=59.9)
    assert not reserve.holds_back(1, waited_s=60.0)
    assert LargeReserve(4, 12.0, 1 / 3).max_hold_s == DEFAULT_MAX_HOLD_S


def test_no_large_arrivals_keep_nothing_and_off_holds_nothing_back() -> None:
    assert not LargeReserve(1, 8.0, 0.0).holds_back(1)
    assert not LargeReserve(0, 0.0, 0.0).holds_back(1)


def test_a_pods_devices_are_sized_against_the_gpu_that_offers_their_profile() -> None:
    def demand(*units: DemandUnit) -> PodDemand:
        return PodDemand("team-a/p", tuple(units))

    def mig(profile: str, count: int = 1) -> DemandUnit:
        return DemandUnit(mig_resource(profile), count, UnitKind.MIG, profile, claim=True)

    assert device_sizes(demand(mig("7g.80gb"))) == [(7, 7)]
    assert device_sizes(demand(mig("4g.24gb"))) == [(4, 4)]  # an A30's whole GPU
    assert device_sizes(demand(mig("4g.40gb"))) == [(4, 7)]
    assert device_sizes(demand(mig("1g.10gb", 2))) == [(1, 7), (1, 7)]
    whole = DemandUnit(WHOLE_GPU_RESOURCE, 1, UnitKind.WHOLE_GPU, None)
    assert device_sizes(demand(whole)) == [(7, 7)]  # a whole GPU weighs what a 7g does
    assert is_large(device_sizes(demand(whole)))
    assert not is_large(device_sizes(demand(mig("3g.40gb"))))
