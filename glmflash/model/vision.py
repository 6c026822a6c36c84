"""The vision path: a 32x32 RGB image becomes 16 tokens in the language model's input.

    patches  [B, 8, 8, 48]    4x4-pixel patches of the blurred, standardized image (a fixed
                              5x5 Gaussian, sigma 1.5 px; each channel centred, ink made
                              positive, one scale per image); (channel, row, column) inside
    tower    -> [B, 16, C]    patch embedding + learned row and column embeddings, 2 non-causal
                              transformer blocks (2-D RoPE on queries and keys, as in GLM-4.1V's
                              vision encoder), 2x2 merge (concatenate each 2x2 group, then
                              linear), MLP projector into the LM's width C
    sequence bos, image_start, image x 16, image_end, "digit:"   -> the LM answers "7"

The 16 placeholder embeddings are replaced by the tower's tokens before the LM runs
(`GLMFlash.forward_embeddings`). `DirectPatchBaseline` is the simpler path that skips the
transformer: each 2x2 group of raw patches (8x8 pixels, 192 values) is projected straight to
one token.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from glmflash.config.model import ModelConfig
from glmflash.config.vision import TOWERS
from glmflash.model.lm import GLMFlash, ModelOutput
from glmflash.model.norm import RMSNorm
from glmflash.model.rope import RotaryEmbedding
from glmflash.tokenizer import BOS, IMAGE, IMAGE_END, IMAGE_START, encode

IMAGE_SIZE, PATCH = 32, 4
GRID = IMAGE_SIZE // PATCH  # 8 x 8 patches
PATCH_DIM = 3 * PATCH * PATCH  # 48
MERGE = 2  # 2x2 patches -> one token
N_IMAGE_TOKENS = (GRID // MERGE) ** 2  # 16
PROMPT = "digit:"
DIGIT_TOKENS = tuple(encode("0123456789"))  # the answer to image of digit d is DIGIT_TOKENS[d]
BLUR_SIGMA, BLUR_RADIUS = 1.5, 2  # the fixed low-pass before patching (see `blur`)


def patchify(images: Tensor) -> Tensor:
    """[B, 3, 32, 32] -> [B, 8, 8, 48]: patch (i, j) holds pixels 4i..4i+3 x 4j..4j+3."""
    B = images.shape[0]
    x = images.reshape(B, 3, GRID, PATCH, GRID, PATCH).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, GRID, GRID, PATCH_DIM)


def standardize(images: Tensor, eps: float = 1e-3) -> Tensor:
    """Per image and channel: centre, turn the ink positive, one scale for all channels.

    x_c = bg_c + a ink (fg_c - bg_c) + noise. The ink covers a minority of the pixels, so the
    median is the background and the mean lies on the ink's side of it: multiplying the centred
    channel by sign(mean_c - median_c) makes the ink positive, light-on-dark or dark-on-light.
    Dividing by one standard deviation over all channels keeps each channel's signal-to-noise
    ratio; the colours and the ink intensity a drop out."""
    flat = images.flatten(-2)
    mean = flat.mean(-1, keepdim=True)
    sign = torch.where(mean >= flat.median(-1, keepdim=True).values, 1.0, -1.0)
    centred = (flat - mean) * sign
    scale = (centred.pow(2).mean((-2, -1), keepdim=True) + eps**2).sqrt()
    return (centred / scale).view_as(images)


def gaussian_kernel(sigma: float = BLUR_SIGMA, radius: int = BLUR_RADIUS) -> Tensor:
    """The separable 2-D Gaussian [2r+1, 2r+1], normalised to sum 1."""
    x = torch.arange(-radius, radius + 1, dtype=torch.float64)
    g = torch.exp(-x.square() / (2 * sigma**2))
    g = g / g.sum()
    return g[:, None] * g[None, :]


def blur(images: Tensor, kernel: Tensor) -> Tensor:
    """Per-channel low-pass [B, 3, H, W] -> same shape, edges replicated.

    Patches on a fixed 4x4 grid are not shift-equivariant: a glyph moved by a fraction of a
    patch changes every patch's content abruptly. Blurring first makes that change smooth, so
    shifts between the trained ones are interpolated, and it averages the pixel noise down
    (its standard deviation by about 1 / (sqrt(4 pi) sigma) = 0.19 at sigma 1.5)."""
    r = kernel.shape[-1] // 2
    weight = kernel.to(images.dtype).expand(images.shape[1], 1, -1, -1)
    return F.conv2d(F.pad(images, (r, r, r, r), mode="replicate"), weight, groups=images.shape[1])


class Preprocess(nn.Module):
    """Image [B, 3, 32, 32] -> patches [B, 8, 8, 48] of the blurred, standardized image."""

    def __init__(self, sigma: float = BLUR_SIGMA) -> None:
        super().__init__()
        self.register_buffer("kernel", gaussian_kernel(sigma).float(), persistent=False)

    def forward(self, images: Tensor) -> Tensor:
        return patchify(standardize(blur(images, self.kernel)))


def merge_2x2(x: Tensor) -> Tensor:
    """[B, H, W, D] -> [B, H/2 * W/2, 4D]: each 2x2 group concatenated (row-major groups)."""
    B, H, W, D = x.shape
    x = x.reshape(B, H // MERGE, MERGE, W // MERGE, MERGE, D).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(B, (H // MERGE) * (W // MERGE), MERGE * MERGE * D)


def image_prompt_tokens(prompt: str = PROMPT) -> list[int]:
    """bos, image_start, 16 image placeholders, image_end, then the prompt's bytes."""
    return [BOS, IMAGE_START] + [IMAGE] * N_IMAGE_TOKENS + [IMAGE_END] + encode(prompt)


class GridRotary(nn.Module):
    """2-D RoPE on the G x G patch grid: the first half of each head's channels is rotated by
    the patch's row, the second half by its column, so q . k depends on (row, column)
    differences only: attention that sees the glyph's shape the same wherever it is drawn."""

    def __init__(self, head_dim: int, grid: int = GRID, theta: float = 100.0) -> None:
        super().__init__()
        self.grid = grid
        self.rope = RotaryEmbedding(head_dim // 2, grid, theta)

    def forward(self, x: Tensor) -> Tensor:
        """x [B, H, G*G, D] (patches row-major) -> rotated, same shape."""
        B, H, N, D = x.shape
        rows, cols = x.view(B, H, self.grid, self.grid, D).chunk(2, -1)
        rows = self.rope(rows.transpose(2, 3)).transpose(2, 3)  # the row index moved to dim -2
        return torch.cat((rows, self.rope(cols)), -1).view(B, H, N, D)


class VisionBlock(nn.Module):
    """Pre-norm transformer block over the 64 patches; attention is bidirectional, with 2-D
    RoPE on queries and keys:
    x = x + W_o softmax(R q (R k)^T / sqrt(d)) v,   x = x + W_2 gelu(W_1 norm(x))."""

    def __init__(self, width: int, heads: int, mlp_ratio: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.rotary = GridRotary(width // heads)
        self.attn_norm = RMSNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.mlp_norm = RMSNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, mlp_ratio * width), nn.GELU(), nn.Linear(mlp_ratio * width, width)
        )

    def forward(self, x: Tensor) -> Tensor:
        B, N, C = x.shape
        q, k, v = (
            self.qkv(self.attn_norm(x))
            .view(B, N, 3, self.heads, C // self.heads)
            .permute(2, 0, 3, 1, 4)
        )
        q, k = self.rotary(q), self.rotary(k)
        a = F.scaled_dot_product_attention(q, k, v)  # no mask: every patch sees every patch
        x = x + self.proj(a.transpose(1, 2).reshape(B, N, C))
        return x + self.mlp(self.mlp_norm(x))


class VisionTower(nn.Module):
    """Image [B, 3, 32, 32] -> 16 tokens [B, 16, cfg.d_model].

    The vision width defaults to d_model / 2 (96 in the 25m preset, at least 32): the tower
    only has to tell 10 digits apart, and half width keeps it a small fraction of the LM."""

    def __init__(
        self, cfg: ModelConfig, width: int | None = None, heads: int = 4, n_blocks: int = 2
    ) -> None:
        super().__init__()
        width = width or max(32, cfg.d_model // 2)
        self.width = width
        self.preprocess = Preprocess()
        self.patch_embed = nn.Linear(PATCH_DIM, width)
        self.row = nn.Parameter(0.02 * torch.randn(GRID, width))  # pos(i, j) = row_i + col_j
        self.col = nn.Parameter(0.02 * torch.randn(GRID, width))
        self.blocks = nn.ModuleList(VisionBlock(width, heads) for _ in range(n_blocks))
        self.norm = RMSNorm(width)
        self.merge = nn.Linear(MERGE * MERGE * width, width)
        self.projector = nn.Sequential(
            nn.Linear(width, cfg.d_model), nn.GELU(), nn.Linear(cfg.d_model, cfg.d_model)
        )

    def forward(self, images: Tensor) -> Tensor:
        x = self.patch_embed(self.preprocess(images)) + self.row[:, None] + self.col[None, :]
        B = x.shape[0]
        x = x.reshape(B, GRID * GRID, self.width)
        for block in self.blocks:
            x = block(x)
        x = self.norm(x).view(B, GRID, GRID, self.width)
        return self.projector(self.merge(merge_2x2(x)))


class DirectPatchBaseline(nn.Module):
    """Image -> 16 tokens by one linear map of each 2x2 group of raw patches (no transformer)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.preprocess = Preprocess()  # the same input as the tower's: a fair comparison
        self.proj = nn.Linear(MERGE * MERGE * PATCH_DIM, cfg.d_model)

    def forward(self, images: Tensor) -> Tensor:
        return self.proj(merge_2x2(self.preprocess(images)))


def make_tower(kind: str, cfg: ModelConfig) -> nn.Module:
    """'blocks': the two-block VisionTower; 'direct': the DirectPatchBaseline."""
    if kind == "blocks":
        return VisionTower(cfg)
    if kind == "direct":
        return DirectPatchBaseline(cfg)
    raise ValueError(f"unknown tower {kind!r}; choose from {', '.join(TOWERS)}")


class VisionLanguageModel(nn.Module):
    """The LM reading an image: the placeholder embeddings are replaced by the tower's tokens."""

    def __init__(self, lm: GLMFlash, tower: nn.Module, prompt: str = PROMPT) -> None:
        super().__init__()
        self.lm, self.tower, self.prompt = lm, tower, prompt
        self.register_buffer("tokens", torch.tensor(image_prompt_tokens(prompt)), persistent=False)
        self.register_buffer("digit_tokens", torch.tensor(DIGIT_TOKENS), persistent=False)

    def embed(self, images: Tensor) -> Tensor:
        """The LM's input embeddings [B, T, C] with the image tokens in place."""
        tokens = self.tokens.expand(images.shape[0], -1)
        x = self.lm.embedding(tokens)
        image_tokens = self.tower(images.to(x.dtype)).to(x.dtype)
        return x.masked_scatter((tokens == IMAGE)[..., None], image_tokens)

    def forward(self, images: Tensor) -> ModelOutput:
        return self.lm.forward_embeddings(self.embed(images))

    def answer_logits(self, images: Tensor) -> Tensor:
        """Logits [B, V] of the token after the prompt: the answer."""
        return self.forward(images).logits[:, -1]

    def align_logits(self, images: Tensor) -> Tensor:
        """Answer logits read straight off the image tokens, skipping the LM's blocks:
        mean_t(final_norm(token_t)) @ E^T with the LM's tied head. Training the tower on these
        first (cheap: no LM blocks) turns each token (normalised before the mean, so that none
        can dominate it) towards the digit's embedding, which the LM then only has to read."""
        return self.lm.output(self.lm.final_norm(self.tower(images)).mean(1))

    def answer_targets(self, labels: Tensor) -> Tensor:
        """Digit labels [B] -> their byte tokens [B]."""
        return self.digit_tokens[labels]

    @torch.no_grad()
    def predict(self, images: Tensor) -> Tensor:
        """The greedy answer as a digit [B]; -1 where the top token is not a digit."""
        top = self.answer_logits(images).argmax(-1)
        match = top[:, None] == self.digit_tokens[None]
        return torch.where(match.any(-1), match.float().argmax(-1), -1)


__all__ = [
    "DirectPatchBaseline",
    "VisionLanguageModel",
    "VisionTower",
    "image_prompt_tokens",
    "make_tower",
    "merge_2x2",
    "patchify",
]
