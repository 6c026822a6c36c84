import torch

from glmflash.model.rope import RotaryEmbedding


def test_offset_equals_slice_of_full():
    rope = RotaryEmbedding(16, 8)  # cache shorter than the use: must grow
    x = torch.randn(2, 3, 30, 16, dtype=torch.float64)
    full = rope(x.double())
    assert torch.allclose(rope(x[:, :, 10:17], offset=10), full[:, :, 10:17], atol=1e-6)


def test_scores_depend_only_on_relative_position():
    rope = RotaryEmbedding(8, 64)
    q, k = torch.randn(8), torch.randn(8)

    def score(i: int, j: int) -> torch.Tensor:
        return rope(q.view(1, 8), offset=i) @ rope(k.view(1, 8), offset=j).T

    assert torch.allclose(score(5, 2), score(40, 37), atol=1e-5)
    assert not torch.allclose(score(5, 2), score(5, 4), atol=1e-3)


def test_matches_complex_rotation():
    D, T = 12, 9
    rope = RotaryEmbedding(D, T, theta=100.0)
    x = torch.randn(T, D, dtype=torch.float64)
    freqs = 100.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    angle = torch.arange(T, dtype=torch.float64)[:, None] * freqs
    z = torch.complex(x[:, : D // 2], x[:, D // 2 :]) * torch.polar(torch.ones_like(angle), angle)
    ref = torch.cat((z.real, z.imag), -1)
    assert torch.allclose(rope(x), ref, atol=1e-6)
    assert torch.allclose(rope(x).norm(dim=-1), x.norm(dim=-1), atol=1e-6)
