"""The digit renderer: determinism, exact stroke coverage, colours, noise, disjoint splits."""

import colorsys
import importlib.util
import math

import numpy as np
import pytest
import torch

from glmflash.data import derive_seed, digits
from glmflash.data.digits import RANGES, RenderParams, batch, ink, render, sample


def test_sample_is_a_pure_function_of_split_index_seed():
    for split in digits.SPLITS:
        a, la = sample(split, 17, seed=3)
        b, lb = sample(split, 17, seed=3)
        assert torch.equal(a, b) and la == lb
        assert not torch.equal(a, sample(split, 18, seed=3)[0])
        assert not torch.equal(a, sample(split, 17, seed=4)[0])
    assert not torch.equal(sample("train", 5)[0], sample("heldout", 5)[0])


def test_batch_shapes_range_and_labels():
    images, labels = batch("heldout", 20, 30, seed=1)
    assert images.shape == (30, 3, 32, 32) and images.dtype == torch.float32
    assert labels.shape == (30,) and labels.dtype == torch.int64
    assert images.min() >= 0 and images.max() <= 1
    for block in labels.view(3, 10):  # every aligned block of 10 holds each digit once
        assert sorted(block.tolist()) == list(range(10))
    for i in (0, 13, 29):
        image, label = sample("heldout", 20 + i, seed=1)
        assert torch.equal(images[i], image) and labels[i] == label


def brute_force_distance(point, segments, n=20001):
    """Distance to the segments by dense sampling of every segment."""
    t = np.linspace(0, 1, n)[:, None]
    best = math.inf
    for a, b in segments:
        pts = a + t * (b - a)
        best = min(best, np.sqrt(((pts - point) ** 2).sum(-1)).min())
    return best


def test_segment_distance_against_dense_sampling():
    rng = np.random.default_rng(0)
    for S in (1, 3, 7):
        segments = rng.uniform(0, 32, (S, 2, 2))
        points = rng.uniform(-2, 34, (25, 2))
        d = digits.segment_distance(points, segments)
        ref = [brute_force_distance(p, segments) for p in points]
        np.testing.assert_allclose(d, ref, atol=2e-3)
    # a degenerate segment (both ends equal) is a point
    d = digits.segment_distance(np.array([[3.0, 4.0]]), np.zeros((1, 2, 2)))
    np.testing.assert_allclose(d, [5.0])


@pytest.mark.parametrize("width", [1.0, 2.0, 2.6])
def test_stroke_coverage_is_exact_box_filter_for_an_axis_aligned_stroke(width):
    """The stem of '1' is vertical at x = 16 + 0.2 * UNIT; far from its ends each pixel's ink
    is the overlap of the pixel [c, c + 1] with the band [x - w/2, x + w/2]."""
    cover = ink(1, RenderParams(width=width))
    x = 16 + 0.2 * digits.UNIT
    lo, hi = x - width / 2, x + width / 2
    expected = [max(0.0, min(c + 1, hi) - max(c, lo)) for c in range(32)]
    for row in (14, 16, 19):
        np.testing.assert_allclose(cover[row], expected, atol=1e-9)


def test_shift_and_scale_move_the_glyph():
    base = ink(7, RenderParams())
    shifted = ink(7, RenderParams(dx=3, dy=-2))
    np.testing.assert_allclose(shifted[0:30, 3:32], base[2:32, 0:29], atol=1e-9)  # y-2, x+3
    big = ink(0, RenderParams(scale=1.1)).sum()
    assert big > ink(0, RenderParams(scale=0.9)).sum()


def test_colour_intensity_and_noise_composition():
    fg, bg = (0.9, 0.5, 0.2), (0.1, 0.3, 0.6)
    p = RenderParams(fg=fg, bg=bg, intensity=0.7)
    image = render(4, p).double()
    cover = torch.from_numpy(ink(4, p))
    for c in range(3):
        expected = bg[c] + 0.7 * cover * (fg[c] - bg[c])
        torch.testing.assert_close(image[c], expected, atol=1e-6, rtol=0)
    grey = RenderParams(fg=(0.5,) * 3, bg=(0.5,) * 3, noise=0.05, noise_seed=9)
    noise = render(4, grey).double() - 0.5  # nothing clips: 10 sigma from 0 and 1
    assert abs(noise.std().item() - 0.05) < 0.003 and abs(noise.mean().item()) < 0.003
    assert torch.equal(render(4, grey), render(4, grey))


def test_glyphs_are_distinct_and_inside_the_image():
    covers = [ink(d, RenderParams()) for d in range(10)]
    for i in range(10):
        assert covers[i].sum() > 20
        for j in range(i):
            assert np.abs(covers[i] - covers[j]).sum() > 20, (i, j)
    extreme = RenderParams(scale=1.15, slant=0.2, dx=5, dy=5, width=2.6)
    for d in range(10):  # the farthest placement still fits in the frame
        c = ink(d, extreme)
        assert c[0].sum() == c[-1].sum() == c[:, 0].sum() == c[:, -1].sum() == 0


def hue_band(rgb):
    h, s, v = colorsys.rgb_to_hsv(*rgb)
    return int(h * 12) % 12


def drawn_params(split, n=400):
    return [
        digits.sample_params(RANGES[split], np.random.default_rng(derive_seed("t", split, i)))
        for i in range(n)
    ]


def test_heldout_parameter_ranges_are_disjoint_from_train():
    r_train, r_held = RANGES["train"], RANGES["heldout"]
    assert r_held.intensity[1] < r_train.intensity[0]
    assert r_train.noise[1] < r_held.noise[0]
    assert not set(r_train.hue_bands) & set(r_held.hue_bands)
    seen = {}
    for split in digits.SPLITS:
        ps = drawn_params(split)
        seen[split] = {
            "dx": np.array([p.dx for p in ps]),
            "dy": np.array([p.dy for p in ps]),
            "intensity": [p.intensity for p in ps],
            "noise": [p.noise for p in ps],
            "bands": {hue_band(c) for p in ps for c in (p.fg, p.bg)},
        }
    train, held, far = seen["train"], seen["heldout"], seen["far"]

    def in_gap(v):  # |shift| in [1.25, 1.75]: 0.25 px from the train bands [0, 1], [2, 3.5]
        return (abs(v) >= 1.25) & (abs(v) <= 1.75)

    for axis in ("dx", "dy"):
        a = abs(train[axis])
        assert ((a <= 1) | ((a >= 2) & (a <= 3.5))).all()
        assert (a < 1).any() and (a > 2).any()
    assert (in_gap(held["dx"]) | in_gap(held["dy"])).all()
    assert max(abs(held["dx"]).max(), abs(held["dy"]).max()) <= 3.5
    assert min(abs(far["dx"]).min(), abs(far["dy"]).min()) >= 4
    assert max(abs(far["dx"]).max(), abs(far["dy"]).max()) <= 5
    for split in ("heldout", "far"):
        assert max(seen[split]["intensity"]) < min(train["intensity"])
        assert max(train["noise"]) < min(seen[split]["noise"])
        assert seen[split]["bands"] == set(r_held.hue_bands)
    assert train["bands"] == set(r_train.hue_bands)
    for split in digits.SPLITS:  # both signs and both axes really vary
        assert (seen[split]["dx"] > 0).any() and (seen[split]["dx"] < 0).any()


def test_bad_inputs():
    with pytest.raises(ValueError, match="digit"):
        ink(10, RenderParams())
    with pytest.raises(ValueError, match="split"):
        sample("dev", 0)


def test_sklearn_digits_optional():
    data = digits.sklearn_digits()
    if importlib.util.find_spec("sklearn") is None:
        assert data is None
    else:
        images, labels = data
        assert images.shape[1:] == (3, 32, 32) and len(images) == len(labels)
        assert images.min() >= 0 and images.max() <= 1
