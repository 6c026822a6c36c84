import itertools

import torch

from glmflash.train.muon import baddbmm, newton_schulz


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


def textbook_newton_schulz(g: torch.Tensor, steps: int) -> torch.Tensor:
    """The quintic iteration as the paper writes it: X <- a X + (b A + c A^2) X, A = X X^T."""
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g.mT if g.shape[-2] > g.shape[-1] else g
    x = x / (x.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        A = x @ x.mT
        x = a * x + (b * A + c * A @ A) @ x
    return x.mT if g.shape[-2] > g.shape[-1] else x


def test_fused_iteration_equals_the_textbook_formula():
    torch.manual_seed(1)
    for shape in [(6, 6), (5, 9), (9, 5), (4, 7, 3), (2, 3, 5, 8)]:
        g = torch.randn(shape, dtype=torch.float64)
        for steps in (1, 5):
            want = textbook_newton_schulz(g, steps)
            got = newton_schulz(g, steps, dtype=torch.float64)
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_baddbmm_is_beta_bias_plus_alpha_product():
    torch.manual_seed(2)
    for lead in [(), (3,), (2, 4)]:
        bias, m1, m2 = (
            torch.randn(*lead, *s, dtype=torch.float64) for s in [(4, 6), (4, 5), (5, 6)]
        )
        got = baddbmm(bias, m1, m2, beta=-0.5, alpha=2.0)
        torch.testing.assert_close(got, -0.5 * bias + 2.0 * m1 @ m2)
