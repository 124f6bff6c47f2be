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


def test_the_renew_deadline_defaults_to_two_thirds_of_the_lease_and_reaches_the_settings() -> None:
    assert parsed().lease_renew_deadline_s == 40
    assert parsed("--repartition-lease-s", "30").lease_renew_deadline_s == 20
    settings = parsed("--repartition-lease-s", "30", "--repartition-renew-deadline-s", "25")
    assert settings.lease_renew_deadline_s == 25


@pytest.mark.parametrize(
    ("lease_s", "renew_s", "interval_s", "said"),
    [
        (
            60.0,
            60.0,
            15.0,
            "--repartition-renew-deadline-s 60 must be shorter than --repartition-lease-s 60",
        ),
        (
            60.0,
            15.0,
            15.0,
            "--repartition-interval-s 15 must be shorter than --repartition-renew-deadline-s 15",
        ),
        (60.0, float("nan"), 15.0, "--repartition-renew-deadline-s nan: must be a finite"),
    ],
    ids=["not-shorter-than-the-lease", "not-longer-than-a-round", "not-a-number"],
)
def test_a_renew_deadline_outside_round_and_lease_is_refused_with_both_flags(
    lease_s: float, renew_s: float, interval_s: float, said: str
) -> None:
    with pytest.raises(CommandError, match=said):
        RepartitionSettings(
            lease_duration_s=lease_s, renew_deadline_s=renew_s, interval_s=interval_s
        )
