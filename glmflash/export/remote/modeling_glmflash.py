"""Hugging Face wrapper of `GLMFlash` (lm.py beside this file) for AutoModelForCausalLM.

`generate` recomputes the whole prefix for every new token (no KV cache): the model's own
decoding state (recurrent states and sparse KV caches) does not fit transformers' Cache
classes, and full recomputation is the oracle glmflash tests its cached decoding against.
There is no attention mask, so padded batches are refused rather than silently misread.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_glmflash import GlmFlashConfig
from .lm import GLMFlash, cross_entropy
from .rope import RotaryEmbedding


class GlmFlashForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = GlmFlashConfig
    main_input_name = "input_ids"
    _no_split_modules = ["Block"]
    # The head is the embedding (GLMFlash ties them); model.safetensors stores it once.
    _tied_weights_keys = {"model.output.weight": "model.embedding.weight"}

    def __init__(self, config: GlmFlashConfig) -> None:
        super().__init__(config)
        self.model = GLMFlash(config.to_model_config())
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        """Every weight comes from model.safetensors; only RoPE's tables, non-persistent
        buffers that transformers leaves uninitialised when it loads, are rebuilt here."""
        if isinstance(module, RotaryEmbedding):
            fresh = RotaryEmbedding(module.dim, module.cos.shape[0], module.theta)
            for name, buffer in fresh.named_buffers():
                setattr(module, name, buffer.to(module.cos.device))

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.embedding

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.embedding = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.model.output

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.model.output = value

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        inputs_embeds: Tensor | None = None,
        labels: Tensor | None = None,
        return_dict: bool | None = None,
        logits_to_keep: int = 0,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast | tuple:
        """Logits [B, T, V]; with labels [B, T] (transformers' convention: the inputs, shifted
        here), the mean next-token cross-entropy, positions labelled -100 ignored."""
        if attention_mask is not None and not bool(attention_mask.all()):
            raise ValueError("glmflash has no attention mask: pass unpadded rows of equal length")
        if inputs_embeds is None:
            logits = self.model(input_ids).logits
        else:
            logits = self.model.forward_embeddings(inputs_embeds).logits
        loss = None if labels is None else cross_entropy(logits[:, :-1], labels[:, 1:])
        if logits_to_keep:
            logits = logits[:, -logits_to_keep:]
        out = CausalLMOutputWithPast(loss=loss, logits=logits)
        return out.to_tuple() if return_dict is False else out

    def prepare_inputs_for_generation(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """The whole sequence every step: no cache to continue from."""
        return {"input_ids": input_ids, "attention_mask": attention_mask}
