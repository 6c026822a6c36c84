"""The vision path: patches, merging, the built sequence, and that images reach the answer."""

import pytest
import torch

from glmflash.config import model_config
from glmflash.model.lm import GLMFlash
from glmflash.model.vision import (
    N_IMAGE_TOKENS,
    DirectPatchBaseline,
    GridRotary,
    VisionLanguageModel,
    VisionTower,
    blur,
    gaussian_kernel,
    image_prompt_tokens,
    make_tower,
    merge_2x2,
    patchify,
    standardize,
)
from glmflash.tokenizer import BOS, IMAGE, IMAGE_END, IMAGE_START, encode

CFG = model_config("tiny", n_layers=2)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: one thread avoids waiting on a second, busy core."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def vlm(kind: str, seed: int = 0) -> VisionLanguageModel:
    torch.manual_seed(seed)
    return VisionLanguageModel(GLMFlash(CFG), make_tower(kind, CFG)).double()


def test_patchify_against_pixel_loop():
    images = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    patches = patchify(images)
    assert patches.shape == (2, 8, 8, 48)
    for i, j in [(0, 0), (3, 5), (7, 7), (6, 1)]:
        ref = torch.stack(
            [
                images[:, c, 4 * i + r, 4 * j + s]
                for c in range(3)
                for r in range(4)
                for s in range(4)
            ],
            -1,
        )
        assert torch.equal(patches[:, i, j], ref)


@pytest.mark.parametrize("shape", [(1, 8, 8, 5), (3, 4, 6, 2)])
def test_merge_2x2_against_loop(shape):
    x = torch.randn(shape, dtype=torch.float64)
    merged = merge_2x2(x)
    B, H, W, D = shape
    assert merged.shape == (B, H // 2 * W // 2, 4 * D)
    for gi in range(H // 2):
        for gj in range(W // 2):
            ref = torch.cat([x[:, 2 * gi + a, 2 * gj + b] for a in (0, 1) for b in (0, 1)], -1)
            assert torch.equal(merged[:, gi * (W // 2) + gj], ref)


def test_sequence_token_order():
    tokens = image_prompt_tokens("digit:")
    assert tokens == [BOS, IMAGE_START] + [IMAGE] * 16 + [IMAGE_END] + encode("digit:")
    assert N_IMAGE_TOKENS == 16


def test_standardize():
    images = torch.rand(4, 3, 32, 32, dtype=torch.float64)
    x = standardize(images)
    torch.testing.assert_close(x.mean((-2, -1)), torch.zeros(4, 3, dtype=torch.float64))
    torch.testing.assert_close(
        x.pow(2).mean((1, 2, 3)), torch.ones(4, dtype=torch.float64), atol=1e-4, rtol=0
    )
    # sparse ink (a fifth of the pixels): colours, intensity and polarity drop out
    # (exactly without the eps that guards blank images)
    g = torch.Generator().manual_seed(0)
    ink = (torch.rand(1, 1, 32, 32, generator=g, dtype=torch.float64) < 0.2).double()
    ink = ink * (0.5 + torch.rand(1, 1, 32, 32, generator=g, dtype=torch.float64))
    fg = torch.tensor([0.9, 0.2, 0.5], dtype=torch.float64)[:, None, None]
    bg = torch.tensor([0.1, 0.3, 0.4], dtype=torch.float64)[:, None, None]
    a = standardize(bg + 0.5 * ink * (fg - bg), eps=0.0)
    for other in (bg + 0.9 * ink * (fg - bg), fg + 0.7 * ink * (bg - fg)):
        torch.testing.assert_close(a, standardize(other, eps=0.0), atol=1e-10, rtol=0)
    assert (a[0][:, ink[0, 0] > 0] > 0).all()  # the ink is positive in every channel


def test_grid_rotary_depends_on_relative_position_only():
    """q . k after 2-D RoPE is unchanged when both patches move by the same (row, col)."""
    rot = GridRotary(8).double()
    g = torch.Generator().manual_seed(0)
    q = torch.randn(8, dtype=torch.float64, generator=g)
    k = torch.randn(8, dtype=torch.float64, generator=g)

    def score(pq, pk):
        x = torch.zeros(2, 64, 8, dtype=torch.float64)
        x[0, pq[0] * 8 + pq[1]], x[1, pk[0] * 8 + pk[1]] = q, k
        r = rot(x.view(1, 2, 64, 8))[0]
        return float(r[0, pq[0] * 8 + pq[1]] @ r[1, pk[0] * 8 + pk[1]])

    base = score((1, 2), (3, 0))
    for t in [(0, 1), (2, 3), (4, 5)]:
        assert abs(score((1 + t[0], 2 + t[1]), (3 + t[0], t[1])) - base) < 1e-6  # float32 RoPE
    assert abs(score((1, 2), (3, 1)) - base) > 1e-3  # a different column offset matters
    assert abs(score((1, 2), (2, 0)) - base) > 1e-3  # and a different row offset


@pytest.mark.parametrize("kind", ["blocks", "direct"])
def test_embed_places_tower_tokens_between_image_markers(kind):
    model = vlm(kind)
    images = torch.rand(3, 3, 32, 32, dtype=torch.float64)
    x = model.embed(images)
    tokens = torch.tensor(image_prompt_tokens())
    assert x.shape == (3, len(tokens), CFG.d_model)
    text = model.lm.embedding(tokens)
    image_tokens = model.tower(images)
    assert image_tokens.shape == (3, 16, CFG.d_model)
    assert torch.equal(x[:, :2], text[:2].expand(3, -1, -1))
    assert torch.equal(x[:, 2:18], image_tokens)
    assert torch.equal(x[:, 18:], text[18:].expand(3, -1, -1))
    out = model(images)
    ref = model.lm.forward_embeddings(
        torch.cat(
            [text[None, :2].expand(3, -1, -1), image_tokens, text[None, 18:].expand(3, -1, -1)], 1
        )
    )
    torch.testing.assert_close(out.logits, ref.logits)


def test_align_logits_average_the_normalised_tokens_through_the_tied_head():
    model = vlm("blocks")
    images = torch.rand(3, 3, 32, 32, dtype=torch.float64)
    tokens = model.tower(images)
    ref = model.lm.final_norm(tokens).mean(1) @ model.lm.embedding.weight.T
    torch.testing.assert_close(model.align_logits(images), ref)


@pytest.mark.parametrize("kind", ["blocks", "direct"])
def test_images_change_the_answer_logits(kind):
    model = vlm(kind)
    a, b = torch.rand(2, 1, 3, 32, 32, dtype=torch.float64)
    la, lb = model.answer_logits(a), model.answer_logits(b)
    assert la.shape == (1, CFG.vocab_size)
    assert (la - lb).abs().max() > 1e-6
    both = model.answer_logits(torch.cat([a, b]))  # batch rows are independent
    torch.testing.assert_close(both, torch.cat([la, lb]))


@pytest.mark.parametrize("kind", ["blocks", "direct"])
def test_gradients_reach_every_vision_parameter(kind):
    model = vlm(kind)
    model.lm.requires_grad_(False)
    images = torch.rand(4, 3, 32, 32, dtype=torch.float64)
    labels = torch.tensor([0, 3, 7, 9])
    loss = torch.nn.functional.cross_entropy(
        model.answer_logits(images), model.answer_targets(labels)
    )
    loss.backward()
    for name, p in model.tower.named_parameters():
        assert p.grad is not None and p.grad.abs().max() > 0, name
    assert all(p.grad is None for p in model.lm.parameters())


class RawPatches(torch.nn.Module):
    def forward(self, images):
        return patchify(images)


def test_tower_attention_is_not_causal():
    """Changing the bottom-right corner's pixels changes the first (top-left) token of the
    tower, and not that of the local direct-patch baseline (both fed raw patches here: the
    image-wide standardization would otherwise reach every token of either)."""
    torch.manual_seed(0)
    tower = VisionTower(CFG).double()
    tower.preprocess = RawPatches()
    images = torch.rand(1, 3, 32, 32, dtype=torch.float64)
    changed = images.clone()
    changed[..., 28:, 28:] = changed[..., 28:, 28:].flip(-1)
    a, b = tower(images), tower(changed)
    assert (a[:, 0] - b[:, 0]).abs().max() > 1e-6
    direct = DirectPatchBaseline(CFG).double()
    direct.preprocess = RawPatches()
    torch.testing.assert_close(direct(images)[:, 0], direct(changed)[:, 0])


def test_tower_sizes():
    cfg = model_config("25m")
    tower = VisionTower(cfg)
    assert tower.width == 96
    n_blocks = sum(p.numel() for p in tower.blocks.parameters())
    per_block = 2 * 96 + (96 * 288 + 288) + (96 * 96 + 96) + 2 * (96 * 384) + 384 + 96
    assert n_blocks == 2 * per_block
    assert sum(p.numel() for p in DirectPatchBaseline(cfg).parameters()) == 192 * 192 + 192


class FixedAnswer(VisionLanguageModel):
    """Answer logits set by the test."""

    def answer_logits(self, images):
        return self.fixed


def test_predict_maps_tokens_to_digits():
    model = FixedAnswer(GLMFlash(CFG), make_tower("direct", CFG))
    model.fixed = torch.zeros(4, CFG.vocab_size)
    for row, token in enumerate(encode("5") + encode("0") + encode("9") + encode("a")):
        model.fixed[row, token] = 1.0
    assert model.predict(torch.zeros(4, 3, 32, 32)).tolist() == [5, 0, 9, -1]
    assert model.answer_targets(torch.tensor([5, 0, 9])).tolist() == encode("509")
    with pytest.raises(ValueError, match="tower"):
        make_tower("cnn", CFG)


@pytest.mark.parametrize("sigma,shape", [(1.5, (2, 3, 32, 32)), (0.7, (1, 3, 9, 13))])
def test_blur_matches_a_direct_sum_over_the_replicated_neighbourhood(sigma, shape):
    g = torch.Generator().manual_seed(1)
    images = torch.rand(shape, generator=g, dtype=torch.float64)
    kernel = gaussian_kernel(sigma)
    assert abs(float(kernel.sum()) - 1) < 1e-12
    out = blur(images, kernel)
    B, C, H, W = shape
    ref = torch.zeros_like(images)
    for i in range(H):
        for j in range(W):
            for di in range(-2, 3):
                for dj in range(-2, 3):
                    ii, jj = min(max(i + di, 0), H - 1), min(max(j + dj, 0), W - 1)
                    ref[..., i, j] += kernel[di + 2, dj + 2] * images[..., ii, jj]
    torch.testing.assert_close(out, ref)
