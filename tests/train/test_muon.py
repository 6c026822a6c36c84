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


def test_a_step_orthogonalises_same_shaped_matrices_together_as_one_by_one():
    """Muon.step stacks matrices by shape; the same step written per parameter."""
    from glmflash.train.muon import Muon

    torch.manual_seed(0)
    shapes = [(6, 10), (6, 10), (3, 6, 10), (10, 6), (4, 4)]
    params = [torch.nn.Parameter(torch.randn(s, dtype=torch.float64)) for s in shapes]
    ref = [p.detach().clone() for p in params]
    opt = Muon(params, lr=0.1, momentum=0.9, weight_decay=0.01, ns_dtype=torch.float64)
    momenta = [torch.zeros_like(r) for r in ref]
    for _ in range(3):
        grads = [torch.randn_like(r) for r in ref]
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        opt.step()
        for r, m, g in zip(ref, momenta, grads, strict=True):
            m.mul_(0.9).add_(g)
            u = newton_schulz(g + 0.9 * m, 5, torch.float64)
            r.mul_(1 - 0.1 * 0.01).add_(u, alpha=-0.1 * 0.2 * max(r.shape[-2:]) ** 0.5)
    for p, r in zip(params, ref, strict=True):
        torch.testing.assert_close(p.detach(), r)
