"""Digits 0-9 rendered as 32x32 RGB images from a built-in stroke font, with held-out renderings.

Each glyph is a few polylines on a 4 x 6 grid (x right, y down; arcs are sampled ellipses).
A rendering places the glyph on the pixel grid and paints it with anti-aliased thick strokes:

    p       = centre + scale * unit * (x - 2 + slant * (3 - y), y - 3) + shift   (unit = 2.5 px)
    d(q)    = distance from pixel centre q to the nearest stroke segment
    ink(q)  = clamp(width / 2 + 1/2 - d(q), 0, 1)          (coverage of a box-filtered pixel)
    image   = clamp(bg + intensity * ink * (fg - bg) + noise, 0, 1),  noise ~ N(0, sigma^2)

Two splits with disjoint ranges for shift, colour, intensity and noise (shared ranges for the
stroke width, scale and slant, which describe the glyph rather than the rendering), and a third,
`far`, that asks for extrapolation in position:

    parameter        train                 heldout                 far
    shift (px)       |dx|, |dy| each in    one axis |.| in         |dx|, |dy| each in
                     [0, 1] or [2, 3.5]    [1.25, 1.75], the       [4, 5]
                                           other in [0, 3.5]
    hues (degrees)   [0, 30) [60, 90) ...  [30, 60) [90, 120) ...  as heldout
                     (6 bands of 30)       (the other 6 bands)
    intensity        [0.75, 1.0]           [0.6, 0.72]             as heldout
    noise sigma      [0.0, 0.05]           [0.06, 0.08]            as heldout
    width (px)       [1.6, 2.6]            same                    same
    scale            [0.85, 1.15]          same                    same
    slant            [-0.2, 0.2]           same                    same

Shift signs are random. A held-out glyph sits at least 0.25 px (on one axis) from every training
placement, in unseen colours, with fainter ink and more noise; `far` moves it beyond every
training shift, a harder test of position invariance.

Colours: the ink and the background each get a hue from the split's bands; one of them is
bright (value 0.75-1) and the other dark (value 0-0.3), light-on-dark or dark-on-light with equal
odds. Every rendering is a pure function of (split, seed, index): its parameters and noise come
from a generator seeded by `derive_seed("digits", split, seed, index)`.

`sklearn_digits()` offers the scikit-learn 8x8 handwritten digits, upsampled to 32x32 RGB, as a
harder out-of-font evaluation when scikit-learn is installed (None otherwise).
"""

from __future__ import annotations

import colorsys
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from glmflash.data import derive_seed

SIZE = 32
UNIT = 2.5  # pixels per glyph-grid unit at scale 1: a glyph is 10 x 15 px
SPLITS = ("train", "heldout", "far")


# -- the stroke font -----------------------------------------------------------------------

Polyline = list[tuple[float, float]]


def arc(cx: float, cy: float, rx: float, ry: float, a0: float, a1: float, n: int = 12) -> Polyline:
    """Points of an elliptical arc from angle a0 to a1 (degrees, counter-clockwise on screen)."""
    angles = np.radians(np.linspace(a0, a1, n))
    return [(cx + rx * math.cos(a), cy - ry * math.sin(a)) for a in angles]


FONT: dict[int, list[Polyline]] = {
    0: [arc(2, 3, 2, 3, 0, 360, 24)],
    1: [[(0.9, 1.2), (2.2, 0), (2.2, 6)], [(1, 6), (3.4, 6)]],
    2: [arc(2, 1.8, 1.9, 1.8, 160, -35) + [(0, 6), (4, 6)]],
    3: [arc(2, 1.5, 1.8, 1.5, 150, -90), arc(2, 4.5, 2, 1.5, 90, -150)],
    4: [[(3, 6), (3, 0), (0, 4.2), (4, 4.2)]],
    5: [[(3.8, 0), (0.5, 0), (0.2, 2.8)] + arc(2, 4.2, 2, 1.8, 140, -150)],
    6: [arc(2, 3, 2, 3, 65, 200, 10), arc(2, 4.3, 2, 1.7, 0, 360, 20)],
    7: [[(0, 0), (4, 0), (1.4, 6)]],
    8: [arc(2, 1.5, 1.7, 1.5, 0, 360, 18), arc(2, 4.4, 2, 1.6, 0, 360, 20)],
    9: [arc(2, 1.7, 2, 1.7, 0, 360, 20), arc(2, 3, 2, 3, -115, 20, 10)],
}


def glyph_segments(digit: int) -> np.ndarray:
    """The stroke segments of a digit on the glyph grid: [S, 2, 2] (segment, end, xy)."""
    if digit not in FONT:
        raise ValueError(f"digit must be 0-9, got {digit!r}")
    segments = [(a, b) for line in FONT[digit] for a, b in zip(line[:-1], line[1:], strict=True)]
    return np.asarray(segments, dtype=np.float64)


# -- one rendering -------------------------------------------------------------------------


@dataclass(frozen=True)
class RenderParams:
    """Everything that varies between renderings of a digit."""

    width: float = 2.0  # stroke width in pixels
    scale: float = 1.0
    slant: float = 0.0  # horizontal shear: x moves by slant * (height above the middle)
    dx: float = 0.0  # shift of the glyph's centre, in pixels
    dy: float = 0.0
    fg: tuple[float, float, float] = (1.0, 1.0, 1.0)  # ink colour, RGB in [0, 1]
    bg: tuple[float, float, float] = (0.0, 0.0, 0.0)
    intensity: float = 1.0  # ink opacity
    noise: float = 0.0  # standard deviation of the per-pixel, per-channel Gaussian noise
    noise_seed: int = 0


def segment_distance(points: np.ndarray, segments: np.ndarray) -> np.ndarray:
    """Distance from each point [P, 2] to its nearest segment [S, 2, 2]: [P].

    d = |q - (a + t (b - a))| with t = clamp(<q - a, b - a> / |b - a|^2, 0, 1)."""
    qx, qy = points[:, 0], points[:, 1]  # [P]
    ax, ay, bx, by = (segments[:, end, axis, None] for end in (0, 1) for axis in (0, 1))
    ex, ey = bx - ax, by - ay
    t = np.clip(((qx - ax) * ex + (qy - ay) * ey) / np.maximum(ex * ex + ey * ey, 1e-12), 0, 1)
    d2 = (qx - ax - t * ex) ** 2 + (qy - ay - t * ey) ** 2  # [S, P]
    return np.sqrt(d2.min(0))


PIXELS = np.stack(
    np.meshgrid(np.arange(SIZE) + 0.5, np.arange(SIZE) + 0.5, indexing="xy"), -1
).reshape(-1, 2)  # pixel centres (x, y), row-major


def ink(digit: int, p: RenderParams) -> np.ndarray:
    """Stroke coverage in [0, 1] of every pixel: [32, 32]."""
    seg = glyph_segments(digit)
    x, y = seg[..., 0], seg[..., 1]
    x = x - 2 + p.slant * (3 - y)
    y = y - 3
    seg = np.stack((SIZE / 2 + p.dx + p.scale * UNIT * x, SIZE / 2 + p.dy + p.scale * UNIT * y), -1)
    d = segment_distance(PIXELS, seg)
    return np.clip(p.width / 2 + 0.5 - d, 0, 1).reshape(SIZE, SIZE)


def render(digit: int, params: RenderParams) -> Tensor:
    """The digit as a float32 RGB image [3, 32, 32] in [0, 1]."""
    cover = ink(digit, params)[None]  # [1, 32, 32]
    fg = np.asarray(params.fg)[:, None, None]
    bg = np.asarray(params.bg)[:, None, None]
    image = bg + params.intensity * cover * (fg - bg)
    if params.noise > 0:
        rng = np.random.default_rng(params.noise_seed)
        image = image + params.noise * rng.standard_normal(image.shape)
    return torch.from_numpy(np.clip(image, 0, 1).astype(np.float32))


# -- the two distributions -----------------------------------------------------------------


@dataclass(frozen=True)
class Ranges:
    """The parameter ranges of one split (see the table in the module docstring)."""

    shift: tuple[tuple[float, float], ...]  # |.| of one axis (chosen at random): these bands
    other_shift: tuple[tuple[float, float], ...]  # |.| of the other axis
    hue_bands: tuple[int, ...]  # 30-degree hue bands (0..11) the colours come from
    intensity: tuple[float, float]
    noise: tuple[float, float]
    width: tuple[float, float] = (1.6, 2.6)
    scale: tuple[float, float] = (0.85, 1.15)
    slant: tuple[float, float] = (-0.2, 0.2)


TRAIN_BANDS, HELDOUT_BANDS = (0, 2, 4, 6, 8, 10), (1, 3, 5, 7, 9, 11)
TRAIN_SHIFTS = ((0.0, 1.0), (2.0, 3.5))
RANGES: dict[str, Ranges] = {
    "train": Ranges(
        shift=TRAIN_SHIFTS,
        other_shift=TRAIN_SHIFTS,
        hue_bands=TRAIN_BANDS,
        intensity=(0.75, 1.0),
        noise=(0.0, 0.05),
    ),
    "heldout": Ranges(
        shift=((1.25, 1.75),),
        other_shift=((0.0, 3.5),),
        hue_bands=HELDOUT_BANDS,
        intensity=(0.6, 0.72),
        noise=(0.06, 0.08),
    ),
    "far": Ranges(
        shift=((4.0, 5.0),),
        other_shift=((4.0, 5.0),),
        hue_bands=HELDOUT_BANDS,
        intensity=(0.6, 0.72),
        noise=(0.06, 0.08),
    ),
}


def split_ranges(split: str) -> Ranges:
    if split not in RANGES:
        raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
    return RANGES[split]


def sample_params(r: Ranges, rng: np.random.Generator) -> RenderParams:
    """Draw one rendering's parameters from the ranges `r`."""

    def u(lo_hi: tuple[float, float]) -> float:
        return float(rng.uniform(*lo_hi))

    def magnitude(bands: tuple[tuple[float, float], ...]) -> float:
        """Uniform over the union of the bands."""
        lengths = np.array([hi - lo for lo, hi in bands])
        lo, hi = bands[rng.choice(len(bands), p=lengths / lengths.sum())]
        return float(rng.uniform(lo, hi)) * rng.choice((-1.0, 1.0))

    first, other = magnitude(r.shift), magnitude(r.other_shift)
    dx, dy = (first, other) if rng.random() < 0.5 else (other, first)

    def colour(value: tuple[float, float]) -> tuple[float, float, float]:
        hue = (rng.choice(r.hue_bands) + rng.random()) / 12.0
        return colorsys.hsv_to_rgb(hue, u((0.4, 1.0)), u(value))

    bright, dark = colour((0.75, 1.0)), colour((0.0, 0.3))
    fg, bg = (bright, dark) if rng.random() < 0.5 else (dark, bright)
    return RenderParams(
        width=u(r.width),
        scale=u(r.scale),
        slant=u(r.slant),
        dx=dx,
        dy=dy,
        fg=fg,
        bg=bg,
        intensity=u(r.intensity),
        noise=u(r.noise),
        noise_seed=int(rng.integers(2**63)),
    )


def sample(split: str, index: int, seed: int = 0) -> tuple[Tensor, int]:
    """Rendering number `index` of `split`: (image [3, 32, 32], label). The label cycles
    through a per-block permutation of 0-9, so any 10 consecutive indices from a multiple of 10
    hold every digit once."""
    rng = np.random.default_rng(derive_seed("digits", split, seed, index))
    order = np.random.default_rng(derive_seed("digits-order", split, seed, index // 10))
    label = int(order.permutation(10)[index % 10])
    return render(label, sample_params(split_ranges(split), rng)), label


def batch(split: str, start: int, n: int, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Renderings start .. start + n - 1: (images [n, 3, 32, 32], labels [n])."""
    pairs = [sample(split, i, seed) for i in range(start, start + n)]
    return torch.stack([p[0] for p in pairs]), torch.tensor([p[1] for p in pairs])


# -- an optional harder evaluation ---------------------------------------------------------


def sklearn_digits() -> tuple[Tensor, Tensor] | None:
    """scikit-learn's 1,797 8x8 handwritten digits as white-on-black 32x32 RGB images, or None
    when scikit-learn is not installed."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        return None
    data = load_digits()
    small = torch.tensor(data.images, dtype=torch.float32)[:, None] / 16.0  # [N, 1, 8, 8]
    big = torch.nn.functional.interpolate(
        small, size=(SIZE, SIZE), mode="bilinear", align_corners=False
    )
    return big.clamp(0, 1).expand(-1, 3, -1, -1).contiguous(), torch.tensor(data.target)
