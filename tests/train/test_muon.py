import itertools

import torch

from glmflash.train.muon import newton_schulz


def test_newton_schulz_approximates_the_polar_factor():
    torch.manual_seed(0)
    for shape, dtype in itertools.product(
        [(16, 16), (8, 24), (24, 8), (3, 12, 20)], [torch.float32, torch.bfloat16]
    ):
        g = torch.randn(shape, dtype=torch.float64)
        u, _, vh = torch.linalg.svd(g, full_matrices=False)
        x = newton_schulz(g, steps=10, dtype=dtype)
        assert x.dtype == torch.float64
        # the iteration maps every singular value into roughly [0.7, 1.2], keeping U and V
        s = torch.linalg.svdvals(x)
        assert s.min() > 0.6 and s.max() < 1.25, (shape, s)
        cos = (x * (u @ vh)).sum((-2, -1)) / (x.norm(dim=(-2, -1)) * (u @ vh).norm(dim=(-2, -1)))
        assert (cos > 0.97).all(), cos
