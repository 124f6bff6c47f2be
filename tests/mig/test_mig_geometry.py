"""The geometry engine against the published facts and a brute-force oracle."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from migslice.mig import (
    CATALOG,
    Placed,
    Rules,
    enumerate_maximal_layouts,
    fit,
    free_placements,
    is_legal,
    make_layout,
    place,
    violations,
)
from tests import mig_oracle

BASIC_80GB = ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")


def as_set(layout: tuple[Placed, ...]) -> frozenset[tuple[str, int]]:
    return frozenset((p.profile, p.start) for p in layout)


@pytest.mark.parametrize(
    ("model", "profiles", "pre_r510", "expected"),
    [
        ("A100-80GB", BASIC_80GB, False, 19),
        ("A100-80GB", BASIC_80GB, True, 18),
        ("H100-80GB", BASIC_80GB, False, 19),
        ("H100-80GB", BASIC_80GB, True, 18),
        ("A100-80GB", (*BASIC_80GB, "1g.20gb"), False, 78),
        ("A30", ("1g.6gb", "2g.12gb", "4g.24gb"), False, 5),
    ],
    ids=[
        "a100-19",
        "a100-pre-r510-18",
        "h100-19",
        "h100-pre-r510-18",
        "a100-with-1g20-78",
        "a30-5",
    ],
)
def test_maximal_layout_counts_match_the_reference(
    model: str, profiles: tuple[str, ...], pre_r510: bool, expected: int
) -> None:
    found = enumerate_maximal_layouts(CATALOG.get(model), profiles, Rules(pre_r510=pre_r510))
    assert len(found) == expected


def test_2g_never_starts_at_memory_slice_6() -> None:
    model = CATALOG.get("A100-80GB")
    assert 6 not in model.profile("2g.20gb").placements
    assert not is_legal(model, [Placed(6, "2g.20gb", 2)])
    for layout in enumerate_maximal_layouts(model):
        assert all(not (p.profile == "2g.20gb" and p.start == 6) for p in layout)


def test_4g_beside_3g_is_legal_only_from_r510() -> None:
    model = CATALOG.get("H100-80GB")
    layout = [place(model, "4g.40gb", 0), place(model, "3g.40gb", 4)]
    assert is_legal(model, layout)
    assert violations(model, layout, Rules(pre_r510=True)) == [
        "4g and 3g instances together need driver R510 or later"
    ]
    assert not fit(model, ["4g.40gb", "3g.40gb"], rules=Rules(pre_r510=True)).feasible
    assert fit(model, ["4g.40gb", "3g.40gb"]).feasible


def test_violations_name_every_problem_at_once() -> None:
    model = CATALOG.get("A100-80GB")
    problems = violations(
        model,
        [
            Placed(0, "3g.40gb", 4),
            Placed(2, "2g.20gb", 2),
            Placed(1, "3g.40gb", 4),
            Placed(0, "9g.1gb", 1),
        ],
    )
    joined = "\n".join(problems)
    assert "no profile '9g.1gb'" in joined
    assert "3g.40gb cannot start at memory slice 1" in joined
    assert "overlaps" in joined


def test_one_media_extension_instance_per_gpu() -> None:
    model = CATALOG.get("A30")
    assert not is_legal(model, [Placed(0, "1g.6gb+me", 1), Placed(2, "2g.12gb+me", 2)])
    result = fit(model, ["1g.6gb+me", "2g.12gb+me"])
    assert not result.feasible
    assert "+me" in result.reason


def test_fit_reports_capacity_reasons_with_numbers() -> None:
    model = CATALOG.get("A100-80GB")
    assert fit(model, ["3g.40gb"] * 3).reason == (
        "3 x 3g.40gb exceed the maximum of 2 per GPU on A100-80GB"
    )
    assert fit(model, ["4g.40gb", "2g.20gb", "2g.20gb"]).reason == (
        "4g.40gb + 2 x 2g.20gb need 8 compute slices; A100-80GB has 7 free of 7"
    )


def test_a_capacity_reason_agrees_with_its_subject_in_number() -> None:
    """It said "7g.80gb need 7 compute slices"."""
    model = CATALOG.get("A100-80GB")
    one = [place(model, "1g.10gb", 0)]
    assert fit(model, ["7g.80gb"], existing=one).reason == (
        "7g.80gb needs 7 compute slices; A100-80GB has 6 free of 7"
    )
    beside = [place(model, "4g.40gb", 0)]
    assert fit(model, ["4g.40gb"], existing=beside).reason.startswith("2 x 4g.40gb exceed")
    full = [place(model, "3g.40gb", 0), place(model, "1g.10gb", 4)]
    assert fit(model, ["2g.20gb", "2g.20gb"], existing=full).reason == (
        "2 x 2g.20gb need 4 compute slices; A100-80GB has 3 free of 7"
    )
    fuller = [place(model, "4g.40gb", 0), place(model, "2g.20gb", 4)]
    assert fit(model, ["3g.40gb"], existing=fuller).reason == (
        "3g.40gb needs 3 compute slices; A100-80GB has 1 free of 7"
    )


def test_fit_and_its_command_line_agree_with_their_subject_in_number(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from migslice.cli import main

    assert main(["fit", "--gpu", "A100-80GB", "7g.80gb", "7g.80gb"]) == 1
    assert "7g.80gb + 7g.80gb do not fit: 2 x 7g.80gb exceed" in capsys.readouterr().err
    assert main(["fit", "--gpu", "A100-80GB", "3g.40gb", "3g.40gb"]) == 0
    assert "A100-80GB: 3g.40gb + 3g.40gb fit\n" in capsys.readouterr().out


def test_fit_explains_a_fragmented_gpu() -> None:
    model = CATALOG.get("A100-80GB")
    existing = [place(model, "1g.10gb", 1), place(model, "1g.10gb", 5)]
    result = fit(model, ["3g.40gb"], existing=existing)
    assert not result.feasible
    assert "free memory slices 0,2-4,6-7" in result.reason
    assert "3g.40gb at 0,4" in result.reason


def test_fit_keeps_existing_instances_where_they_are() -> None:
    model = CATALOG.get("H100-80GB")
    existing = [place(model, "1g.10gb", 6)]
    result = fit(model, ["2g.20gb", "4g.40gb"], existing=existing)
    assert result.feasible
    assert set(existing) <= set(result.placement)
    assert is_legal(model, result.placement)


MODELS_FOR_ORACLE = ["A30", "A100-80GB", "H100-80GB", "RTX-PRO-6000"]


@pytest.mark.parametrize("model_key", MODELS_FOR_ORACLE)
def test_enumeration_agrees_with_brute_force_on_every_profile(model_key: str) -> None:
    model = CATALOG.get(model_key)
    found = {as_set(layout) for layout in enumerate_maximal_layouts(model)}
    assert found == mig_oracle.maximal_sets(model_key)


@pytest.mark.parametrize("pre_r510", [False, True], ids=["r510", "pre-r510"])
def test_enumeration_agrees_with_brute_force_on_basic_profiles(pre_r510: bool) -> None:
    model = CATALOG.get("A100-80GB")
    found = enumerate_maximal_layouts(model, BASIC_80GB, Rules(pre_r510=pre_r510))
    assert {as_set(layout) for layout in found} == mig_oracle.maximal_sets(
        "A100-80GB", BASIC_80GB, pre_r510
    )


@pytest.mark.parametrize("model_key", MODELS_FOR_ORACLE)
def test_every_enumerated_layout_is_legal_and_maximal(model_key: str) -> None:
    model = CATALOG.get(model_key)
    for layout in enumerate_maximal_layouts(model):
        assert is_legal(model, layout)
        assert mig_oracle.is_legal(model, [(p.profile, p.start) for p in layout])
        for name in model.profile_names:
            assert free_placements(model, layout, name) == ()


@st.composite
def fit_cases(draw: st.DrawFn) -> tuple[str, frozenset[tuple[str, int]], list[str]]:
    model_key = draw(st.sampled_from(MODELS_FOR_ORACLE))
    model = CATALOG.get(model_key)
    legal = mig_oracle.legal_sets(model_key)
    existing = draw(st.sampled_from(legal[:: max(1, len(legal) // 400)]))
    wanted = draw(st.lists(st.sampled_from(model.profile_names), min_size=1, max_size=4))
    return model_key, existing, wanted


@settings(max_examples=150, deadline=None)
@given(fit_cases())
def test_fit_is_legal_and_finds_a_placement_whenever_brute_force_does(
    case: tuple[str, frozenset[tuple[str, int]], list[str]],
) -> None:
    model_key, existing_set, wanted = case
    model = CATALOG.get(model_key)
    existing = [place(model, name, start) for name, start in sorted(existing_set)]
    result = fit(model, wanted, existing=existing)
    assert result.feasible == mig_oracle.can_fit(model_key, existing_set, Counter(wanted))
    if result.feasible:
        assert mig_oracle.is_legal(model, [(p.profile, p.start) for p in result.placement])
        assert set(existing) <= set(result.placement)
        added = Counter(p.profile for p in result.placement) - Counter(p.profile for p in existing)
        assert added == Counter(wanted)
    else:
        assert result.reason
        assert result.placement == ()


@settings(max_examples=60, deadline=None)
@given(fit_cases())
def test_free_placements_are_exactly_the_legal_additions(
    case: tuple[str, frozenset[tuple[str, int]], list[str]],
) -> None:
    model_key, existing_set, wanted = case
    model = CATALOG.get(model_key)
    existing = [place(model, name, start) for name, start in sorted(existing_set)]
    for name in set(wanted):
        starts = {p.start for p in free_placements(model, existing, name)}
        expected = {
            s
            for s in model.profile(name).placements
            if mig_oracle.is_legal(model, [*existing_set, (name, s)])
        }
        assert starts == expected


@given(
    st.lists(
        st.builds(
            Placed, st.integers(0, 7), st.sampled_from(["1g.10gb", "2g.20gb"]), st.integers(1, 2)
        ),
        max_size=8,
    )
)
def test_a_layout_is_its_instances_in_placed_order(instances: list[Placed]) -> None:
    assert make_layout(instances) == tuple(sorted(instances))
