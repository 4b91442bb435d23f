"""Colour invariants of the figures: CIEDE2000 under colour-vision simulation, label contrast."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from opentikz_dt.errors import SpecError
from opentikz_dt.figures.colorvision import (MIN_CONTRAST, VISIONS, ciede2000, contrast_ratio, delta_e,
                                             indistinguishable, rgb, simulate)
from opentikz_dt.figures.timeline_styles import (BOX_STYLES, STRATEGY_KINDS, check_distinguishable, fill_of,
                                                 label_color)
from opentikz_dt.spec import load_spec, spec_from_data

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.yaml"))


@pytest.mark.parametrize("lab1, lab2, expected", [
    # Sharma, Wu and Dalal (2005), test data pairs 1, 17, 25 and 34
    ((50, 2.6772, -79.7751), (50, 0, -82.7485), 2.0425),
    ((50, 2.5, 0), (73, 25, -18), 27.1492),
    ((60.2574, -34.0099, 36.2677), (60.4626, -34.1751, 39.4387), 1.2644),
    ((2.0776, 0.0795, -1.1350), (0.9033, -0.0636, -0.5514), 0.9082),
])
def test_ciede2000_matches_the_published_test_data(lab1, lab2, expected):
    assert ciede2000(lab1, lab2) == pytest.approx(expected, abs=1e-4)


def test_simulation_keeps_grays_and_collapses_red_green_for_deutans():
    for vision in VISIONS:
        assert simulate((0.5, 0.5, 0.5), vision) == pytest.approx((0.5, 0.5, 0.5), abs=2e-3)
    red, green = (0.8, 0.2, 0.2), (0.4, 0.5, 0.1)
    assert delta_e(red, green) > 30 and delta_e(red, green, "deutan") < 15
    assert rgb("otorange!50!otpaper") == pytest.approx((0xE6 / 510 + 0.5, 0x9F / 510 + 0.5, 0.5))


def test_the_old_fetch_and_push_fills_fail_for_deutans_and_the_new_ones_pass():
    old = {"fetch": ("otteal!40!otpaper", ""), "push": ("otpurple!45!otpaper", "")}
    assert any("deutan" in p for p in indistinguishable(old, "light"))
    colors = {"weight": "otteal", "grad": "otpurple"}
    new = {kind: (fill_of(BOX_STYLES[kind], colors), "") for kind in ("fetch", "push")}
    assert indistinguishable(new, "light") == [] and indistinguishable(new, "dark") == []
    assert indistinguishable({"a": ("otteal!40!otpaper", "dashed"), "b": ("otteal!40!otpaper", "")}, "light") == []


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_keeps_its_meanings_apart_for_every_reader_in_both_palettes(path):
    spec = load_spec(path)
    for variant in ("light", "dark"):
        assert list(check_distinguishable(dataclasses.replace(spec, figure=dataclasses.replace(spec.figure, palette=variant)))) == []


def test_a_gradient_recoloured_like_the_compute_boxes_is_refused():
    with pytest.raises(SpecError) as error:
        spec_from_data({"strategy": {"kind": "parameter-server"}, "figure": {"colors": {"grad": "otorange"}}})
    assert "'push' (figure.colors.grad) would be otorange, the colour reserved for 'forward' [invariant distinguishable-colors]" in str(error.value)
    with pytest.raises(SpecError, match=r"'push' \(otblue!80!otpaper\) and 'update' \(otblue\) differ by CIEDE2000 [\d.]+ for \w+ vision"):
        spec_from_data({"strategy": {"kind": "parameter-server"}, "figure": {"colors": {"grad": "otblue"}}})


@pytest.mark.parametrize("variant", ["light", "dark"])
def test_box_labels_meet_wcag_contrast_on_their_fills(variant):
    colors = {"data": "otgray", "grad": "otpurple", "weight": "otteal", "server": "otblue"}
    kinds = {kind for kinds in STRATEGY_KINDS.values() for kind in kinds}
    for kind in kinds:
        style = BOX_STYLES[kind]
        fill = rgb(fill_of(style, colors), variant)
        text = rgb(label_color(style, colors, variant), variant)
        assert contrast_ratio(text, fill) >= MIN_CONTRAST, (kind, variant, contrast_ratio(text, fill))
    # the dark palette's old labels: light ink on the mid-tone fills read at about 2:1
    assert contrast_ratio(rgb("otink", "dark"), rgb("otorange!55!otpaper", "dark")) < MIN_CONTRAST
