"""The extender's repartition flags reach the controller's settings, each to its own path."""

from __future__ import annotations

import argparse

import pytest

from extender.command import add_arguments, settings_from_args
from extender.settings import ExtenderSettings, RepartitionSettings, controller_settings
from migslice.console import CommandError
from migslice.repartition import CARVE_MIN_PENDING_S


def parsed(*argv: str) -> RepartitionSettings:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return settings_from_args(parser.parse_args(["--repartition", *argv])).repartition


def test_carve_mode_has_its_own_min_pending_time() -> None:
    settings = controller_settings(parsed("--repartition-carve-min-pending-s", "7"))
    assert settings.carve.min_pending_s == 7
    assert settings.plan.min_pending_s == 30


def test_the_carve_min_pending_default_is_shorter_than_the_mig_manager_paths() -> None:
    settings = controller_settings(parsed("--repartition-min-pending-s", "45"))
    assert settings.carve.min_pending_s == CARVE_MIN_PENDING_S < 30
    assert settings.plan.min_pending_s == 45


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf")])
def test_a_bad_carve_min_pending_names_its_flag(value: float) -> None:
    with pytest.raises(CommandError, match="--repartition-carve-min-pending-s"):
        RepartitionSettings(carve_min_pending_s=value)


def test_the_reserve_max_hold_reaches_the_settings_and_a_bad_one_names_its_flag() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--dra-large-reserve", "--dra-large-reserve-max-hold", "90"])
    assert settings_from_args(args).dra_large_reserve_max_hold_s == 90
    assert settings_from_args(parser.parse_args([])).dra_large_reserve_max_hold_s == 60
    with pytest.raises(CommandError, match="--dra-large-reserve-max-hold"):
        ExtenderSettings(dra_large_reserve_max_hold_s=float("nan"))
