"""glmflash's byte tokenizer for transformers: the ids of tokenizer.py (copied beside this file).

`tokenizer(text).input_ids == encode(text, bos=True)`: BOS first, as every training document
and every prompt of glmflash's `generate` begins; `add_special_tokens=False` gives
`encode(text)`. Special-token names inside a text (say "<eos>") stay bytes, and `decode` keeps
only byte tokens, exactly as tokenizer.py's `decode`, whatever `skip_special_tokens` says.
Byte b is the one-character token chr(b), special ids are named by `token_name`.
"""

from __future__ import annotations

from typing import Any

from transformers import AddedToken, PreTrainedTokenizer

from .tokenizer import (
    BOS,
    BYTE_OFFSET,
    EOS,
    PAD,
    SEP,
    TEXT_VOCAB_SIZE,
    VOCAB_SIZE,
    decode,
    token_name,
)

SPECIAL_IDS = [i for i in range(VOCAB_SIZE) if not BYTE_OFFSET <= i < TEXT_VOCAB_SIZE]


class GlmFlashTokenizer(PreTrainedTokenizer):
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, **kwargs: Any) -> None:
        self._added_tokens_decoder = {
            i: AddedToken(token_name(i), special=True, normalized=False) for i in SPECIAL_IDS
        }
        defaults = dict(
            pad_token=token_name(PAD),
            bos_token=token_name(BOS),
            eos_token=token_name(EOS),
            sep_token=token_name(SEP),
            split_special_tokens=True,
            clean_up_tokenization_spaces=False,
        )
        super().__init__(**{**defaults, **kwargs})

    @property
    def vocab_size(self) -> int:
        return VOCAB_SIZE

    def get_vocab(self) -> dict[str, int]:
        return {self.convert_ids_to_tokens(i): i for i in range(VOCAB_SIZE)}

    def _tokenize(self, text: str, **kwargs: Any) -> list[str]:
        return [chr(b) for b in text.encode("utf-8", "surrogatepass")]

    def _convert_token_to_id(self, token: str) -> int:
        if len(token) != 1 or ord(token) > 255:
            raise KeyError(f"not a byte token: {token!r}")
        return ord(token) + BYTE_OFFSET

    def _convert_id_to_token(self, index: int) -> str:
        if BYTE_OFFSET <= index < TEXT_VOCAB_SIZE:
            return chr(index - BYTE_OFFSET)
        return token_name(index)

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return decode(ord(t) + BYTE_OFFSET for t in tokens if len(t) == 1)

    def _decode(
        self,
        token_ids: int | list[int],
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
        **kwargs: Any,
    ) -> str:
        return decode([token_ids] if isinstance(token_ids, int) else token_ids)

    def build_inputs_with_special_tokens(
        self, token_ids_0: list[int], token_ids_1: list[int] | None = None
    ) -> list[int]:
        return [BOS, *token_ids_0, *(token_ids_1 or [])]

    def get_special_tokens_mask(
        self,
        token_ids_0: list[int],
        token_ids_1: list[int] | None = None,
        already_has_special_tokens: bool = False,
    ) -> list[int]:
        if already_has_special_tokens:
            return super().get_special_tokens_mask(token_ids_0, token_ids_1, True)
        return [1] + [0] * (len(token_ids_0) + len(token_ids_1 or []))

    def create_token_type_ids_from_sequences(
        self, token_ids_0: list[int], token_ids_1: list[int] | None = None
    ) -> list[int]:
        return [0] * len(self.build_inputs_with_special_tokens(token_ids_0, token_ids_1))

    def save_vocabulary(
        self, save_directory: str, filename_prefix: str | None = None
    ) -> tuple[str, ...]:
        return ()  # the vocabulary is the code: nothing to write
