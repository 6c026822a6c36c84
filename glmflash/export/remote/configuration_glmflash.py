"""Hugging Face config of a glmflash model: every `ModelConfig` field, under its own name.

`top_k` (experts per token) is stored as `moe_top_k`: transformers takes a config's `top_k` for
a sampling parameter, drops it on load and refuses to save it. `to_model_config` gives back the
`ModelConfig` (glmflash/config/model.py, copied beside this file as model.py), which validates
every value.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from transformers import PretrainedConfig

from .model import ModelConfig
from .tokenizer import BOS, EOS, PAD

RENAMED = {"top_k": "moe_top_k"}  # ModelConfig field -> config.json key
DEFAULTS = {f.name: f.default for f in dataclasses.fields(ModelConfig)}


class GlmFlashConfig(PretrainedConfig):
    model_type = "glmflash"
    # the generic names transformers' utilities look for
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "n_heads",
        "num_hidden_layers": "n_layers",
        "max_position_embeddings": "context",
    }

    def __init__(self, **kwargs: Any) -> None:
        for name, default in DEFAULTS.items():
            key = RENAMED.get(name, name)
            setattr(self, key, kwargs.pop(key, default))
        defaults = dict(
            bos_token_id=BOS,
            eos_token_id=EOS,
            pad_token_id=PAD,
            tie_word_embeddings=True,
            use_cache=False,
        )
        super().__init__(**{**defaults, **kwargs})
        self.to_model_config()  # a bad value fails here, naming the field

    def to_model_config(self) -> ModelConfig:
        return ModelConfig(**{name: getattr(self, RENAMED.get(name, name)) for name in DEFAULTS})
