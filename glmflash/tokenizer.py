"""Byte-level tokenizer: 4 control tokens, 256 byte tokens, 3 vision tokens.

    pad 0, bos 1, eos 2, sep 3, byte b -> b + 4 (ids 4..259),
    image_start 260, image 261 (placeholder for one image token), image_end 262.

Text is encoded as UTF-8 (lone surrogates included, via ``surrogatepass``), so every Python
string round-trips exactly. Decoding skips non-byte ids and never raises.
"""

from __future__ import annotations

from collections.abc import Iterable

PAD, BOS, EOS, SEP = 0, 1, 2, 3
BYTE_OFFSET = 4
TEXT_VOCAB_SIZE = 260
IMAGE_START, IMAGE, IMAGE_END = 260, 261, 262
VOCAB_SIZE = 263


def encode(text: str, bos: bool = False, eos: bool = False) -> list[int]:
    ids = [b + BYTE_OFFSET for b in text.encode("utf-8", "surrogatepass")]
    return ([BOS] if bos else []) + ids + ([EOS] if eos else [])


def decode_bytes(ids: Iterable[int]) -> bytes:
    """The bytes of the byte tokens in `ids`; every other id is dropped."""
    return bytes(int(i) - BYTE_OFFSET for i in ids if BYTE_OFFSET <= int(i) < TEXT_VOCAB_SIZE)


def decode(ids: Iterable[int]) -> str:
    raw = decode_bytes(ids)
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace")


def token_name(i: int) -> str:
    """Readable name of one id, for debugging displays."""
    names = {
        PAD: "<pad>",
        BOS: "<bos>",
        EOS: "<eos>",
        SEP: "<sep>",
        IMAGE_START: "<img>",
        IMAGE: "<image>",
        IMAGE_END: "</img>",
    }
    if i in names:
        return names[i]
    if BYTE_OFFSET <= i < TEXT_VOCAB_SIZE:
        return repr(bytes([i - BYTE_OFFSET]))[2:-1]
    return f"<unk:{i}>"
