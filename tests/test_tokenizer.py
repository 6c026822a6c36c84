import random

from glmflash import tokenizer as tok


def random_text(rng: random.Random, n: int) -> str:
    pools = [
        (0x20, 0x7E),
        (0x00, 0x1F),
        (0xA0, 0x24F),
        (0x4E00, 0x4FFF),
        (0x1F300, 0x1F64F),
        (0xD800, 0xDFFF),
    ]  # the last: lone surrogates
    out = []
    for _ in range(n):
        lo, hi = rng.choice(pools)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def test_layout():
    assert (tok.PAD, tok.BOS, tok.EOS, tok.SEP) == (0, 1, 2, 3)
    assert tok.encode("A") == [ord("A") + 4]
    assert tok.encode("", bos=True, eos=True) == [1, 2]
    assert tok.TEXT_VOCAB_SIZE == 260 and tok.IMAGE_START == 260 and tok.VOCAB_SIZE == 263
    assert all(4 <= i < 260 for i in tok.encode(random_text(random.Random(0), 200)))


def test_round_trip_any_unicode():
    rng = random.Random(1)
    for n in (0, 1, 5, 50, 300):
        for _ in range(20):
            text = random_text(rng, n)
            assert tok.decode(tok.encode(text, bos=True, eos=True)) == text


def test_decode_never_raises():
    rng = random.Random(2)
    for _ in range(500):
        ids = [rng.randint(-1000, 1000) for _ in range(rng.randint(0, 40))]
        assert isinstance(tok.decode(ids), str)
    assert tok.decode([0xC3 + 4]) == "\ufffd"  # a truncated UTF-8 sequence
    assert tok.decode([tok.IMAGE_START, ord("a") + 4, tok.IMAGE_END]) == "a"


def test_token_names():
    assert tok.token_name(tok.EOS) == "<eos>"
    assert tok.token_name(ord("x") + 4) == "x"
    assert tok.token_name(9999).startswith("<unk")
