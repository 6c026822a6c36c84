"""`glmflash export`: the Hugging Face folder loads where glmflash cannot be imported and
computes what glmflash computes.

One subprocess (`python -I -S`, sys.path: only the site-packages of torch and transformers, so
no .pth file runs and the editable install's finder is absent) checks that glmflash cannot be
found, loads every exported folder with the Auto classes and writes back logits, greedy tokens,
token ids and the config; the tests compare them with glmflash in this process.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from glmflash import tokenizer as tok
from glmflash.checkpoint import save_model
from glmflash.cli import main
from glmflash.config import ModelConfig, model_config
from glmflash.export import hf
from glmflash.generate import allowed_mask, generate
from glmflash.model.lm import GLMFlash, cross_entropy

VARIANTS = {
    "default": {},
    # every other option, and every field off its default in one variant or the other
    "every_option": dict(
        linear_kind="delta",
        sparse_kind="indexer",
        index_pool=2,
        mtp=True,
        stream_mixer="static",
        balance="bias",
        nope_main=True,
        vocab_size=300,
        top_k=3,
        layer_pattern="LS",
        rope_theta=500.0,
        conv_size=3,
        n_shared=2,
        n_streams=2,
        sinkhorn_iters=10,
        norm_eps=1e-5,
        balance_coef=0.02,
        bias_rate=1e-2,
        init_std=0.03,
    ),
    "elu_conv": dict(elu_conv=True, conv_size=3),  # the ELU layers' convolution (not with delta)
}
SHAPES = [(1, 1), (2, 7), (3, 40), (1, 64)]
PROMPTS = ["def f(x):", "# Return x plus one.\ndef increment(x):\n    y", "abc"]
MAX_NEW = 40
TEXTS = [
    "",
    "def f(x):\n    return x + 1\n",
    "héllo wörld ✓ 🙂",
    "a<eos>b<bos><pad></img><sep>",
    "lone \ud800 surrogate",
    "\t\r\n\x00\x7f",
]
DECODE_IDS = [1, 108, 2, 260, 261, 105, 0, 3, 262, 299, 200]

SCRIPT = r"""
import importlib.util, json, sys
sys.path[:0] = json.loads(sys.argv[1])
found = importlib.util.find_spec("glmflash") is not None
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
torch.set_num_threads(1)
req = json.loads(open(sys.argv[2]).read())
inputs = torch.load(sys.argv[3])
out = {"glmflash_findable": found, "version": transformers.__version__, "models": {}}
for name, folder in req["folders"].items():
    cfg = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
    t = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    r = {"config_class": type(cfg).__name__, "model_config": cfg.to_model_config().to_dict()}
    with torch.no_grad():
        r["logits"] = [model(ids).logits for ids in inputs[name]]
        ids = inputs[name][-1]
        r["loss"] = model(ids, labels=ids).loss
        r["generated"] = []
        for prompt, n in zip(req["prompts"], req["max_new"][name]):
            ids = t(prompt, return_tensors="pt").input_ids
            r["generated"].append(model.generate(ids, max_new_tokens=n, do_sample=False)[0]
                                  .tolist()[ids.shape[1]:])
    r["prompt_ids"] = [t(p).input_ids for p in req["prompts"]]
    r["ids"] = [t(x).input_ids for x in req["texts"]]
    r["ids_plain"] = [t(x, add_special_tokens=False).input_ids for x in req["texts"]]
    r["decoded"] = [t.decode(t(x).input_ids) for x in req["texts"]]
    r["decoded_skip"] = [t.decode(t(x).input_ids, skip_special_tokens=True)
                         for x in req["texts"]]
    r["decode_mixed"] = t.decode(req["decode_ids"])
    r["modules"] = sorted({m.rsplit(".", 1)[1] for m in sys.modules
                           if m.startswith("transformers_modules.")})
    out["models"][name] = r
out["glmflash_modules"] = [m for m in sys.modules if m.split(".")[0] == "glmflash"]
torch.save(out, sys.argv[4])
"""


def random_model(seed: int, **overrides) -> GLMFlash:
    """Every weight and buffer moved far off its init: one left unloaded shows in the logits,
    and greedy decoding varies instead of repeating one token (as it does near the init)."""
    torch.manual_seed(seed)
    model = GLMFlash(model_config("tiny", **overrides)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5 * torch.randn_like(p))
        for moe in model.moe_layers():
            moe.select_bias.normal_(0, 0.1)
    return model


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Export each variant from a saved checkpoint, run the subprocess once for all of them."""
    transformers = pytest.importorskip("transformers")
    tmp = tmp_path_factory.mktemp("export")
    models, folders, inputs, max_new, ours = {}, {}, {}, {}, {}
    for i, (name, overrides) in enumerate(VARIANTS.items()):
        model = models[name] = random_model(i, **overrides)
        ckpt = save_model(tmp / name / "ckpt", model, step=0)
        folders[name] = str(hf.export_hf(ckpt, tmp / name / "hf"))
        gen = torch.Generator().manual_seed(i)
        inputs[name] = [
            torch.randint(model.cfg.vocab_size, shape, generator=gen) for shape in SHAPES
        ]
        # full recomputation, as HF generation does, so both compute the same floats
        ours[name] = generate(model, PROMPTS, MAX_NEW, temperature=0.0, use_cache=False)
        max_new[name] = [len(c.ids) + 1 for c in ours[name]]  # and the token it stopped on
    request = dict(
        folders=folders, prompts=PROMPTS, max_new=max_new, texts=TEXTS, decode_ids=DECODE_IDS
    )
    (tmp / "request.json").write_text(json.dumps(request))
    torch.save(inputs, tmp / "inputs.pt")
    (tmp / "check.py").write_text(SCRIPT)
    site = sorted({str(Path(m.__file__).parents[1]) for m in (torch, transformers)})
    env = {
        **os.environ,
        "HF_HOME": str(tmp / "hf_home"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_VERBOSITY": "error",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            str(tmp / "check.py"),
            json.dumps(site),
            str(tmp / "request.json"),
            str(tmp / "inputs.pt"),
            str(tmp / "results.pt"),
        ],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = torch.load(tmp / "results.pt")
    return dict(models=models, folders=folders, inputs=inputs, ours=ours, results=results)


def test_loads_without_glmflash(exported):
    """Self-containment: glmflash was not findable in the subprocess, nothing of it was
    imported, and the model ran from the copied files (the variant's own attention modules)."""
    res = exported["results"]
    assert res["glmflash_findable"] is False
    assert res["glmflash_modules"] == []
    for name, expected in (("default", "attention_linear"), ("every_option", "attention_delta")):
        modules = res["models"][name]["modules"]
        assert {"modeling_glmflash", "lm", "attention_sparse", expected} <= set(modules)


@pytest.mark.parametrize("name", VARIANTS)
def test_config_round_trips(exported, name):
    r = exported["results"]["models"][name]
    assert r["config_class"] == "GlmFlashConfig"
    assert r["model_config"] == exported["models"][name].cfg.to_dict()


def test_variants_move_every_field_off_its_default():
    """Else a field lost on the way would come back as its default and the round trip pass."""
    configs = [model_config("tiny", **overrides) for overrides in VARIANTS.values()]
    for f in dataclasses.fields(ModelConfig):
        assert any(getattr(c, f.name) != f.default for c in configs), f.name


def test_renamed_fields_agree_with_the_remote_config():
    tree = ast.parse((hf.REMOTE / "configuration_glmflash.py").read_text())
    renamed = next(
        ast.literal_eval(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "RENAMED"
    )
    assert renamed == hf.HF_NAMES


@pytest.mark.parametrize("name", VARIANTS)
def test_logits_and_loss_equal_ours(exported, name):
    """Equal within 1e-5 of the logits' scale (here 10-20): transformers places the weights
    at other memory alignments, which changes SIMD summation order by an ulp or so."""
    model, r = exported["models"][name], exported["results"]["models"][name]
    worst, scale = 0.0, 1.0
    with torch.no_grad():
        for ids, theirs in zip(exported["inputs"][name], r["logits"], strict=True):
            mine = model(ids).logits
            assert theirs.shape == mine.shape
            worst = max(worst, (theirs - mine).abs().max().item())
            scale = max(scale, mine.abs().max().item())
        ids = exported["inputs"][name][-1]
        loss = cross_entropy(model(ids).logits[:, :-1], ids[:, 1:])
    print(f"{name}: max |logit difference| {worst:.3g}, max |logit| {scale:.3g}")
    assert worst <= 1e-5 * scale
    assert abs(r["loss"].item() - loss.item()) <= 1e-5 * max(1.0, loss.item())


@pytest.mark.parametrize("name", VARIANTS)
def test_greedy_generate_equals_ours(exported, name):
    """HF greedy tokens begin with ours; where ours stopped at EOS, HF's next token is EOS.
    The prompts go through the HF tokenizer, so its BOS is checked against ours too."""
    r = exported["results"]["models"][name]
    for prompt, c, ids, theirs in zip(
        PROMPTS, exported["ours"][name], r["prompt_ids"], r["generated"], strict=True
    ):
        assert ids == tok.encode(prompt, bos=True)
        assert theirs[: len(c.ids)] == c.ids, prompt
        if c.stop == "eos":
            assert theirs[len(c.ids)] == tok.EOS
    produced = {t for c in exported["ours"][name] for t in c.ids}
    assert len(produced) > 3, "degenerate model: greedy decoding tests little"


def test_generation_config_suppresses_what_we_never_emit():
    model = GLMFlash(model_config("tiny", vocab_size=300))
    data = hf.generation_config(model)
    allowed = allowed_mask(300, torch.device("cpu"))
    assert data["suppress_tokens"] == (~allowed).nonzero().flatten().tolist()
    assert {tok.PAD, tok.BOS, tok.SEP, tok.IMAGE, 299} <= set(data["suppress_tokens"])
    assert tok.EOS not in data["suppress_tokens"]
    assert (data["eos_token_id"], data["pad_token_id"]) == (tok.EOS, tok.PAD)


def test_tokenizer_equals_ours(exported):
    r = exported["results"]["models"]["default"]
    assert r["ids"] == [tok.encode(x, bos=True) for x in TEXTS]
    assert r["ids_plain"] == [tok.encode(x) for x in TEXTS]
    assert r["decoded"] == TEXTS
    assert r["decoded_skip"] == TEXTS
    assert r["decode_mixed"] == tok.decode(DECODE_IDS)


def test_exported_source_is_closed_and_flat(tmp_path, checkpoint):
    folder = hf.export_hf(checkpoint, tmp_path / "hf")
    hf.check_closed(folder)
    lm = (folder / "lm.py").read_text()
    assert "from glmflash" not in lm and "from .attention_sparse import SparseAttention" in lm
    assert {p.name for p in folder.iterdir()} >= {
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "tokenizer_config.json",
        "configuration_glmflash.py",
        "modeling_glmflash.py",
        "tokenization_glmflash.py",
        "model.py",
        "tokenizer.py",
        "attention_delta.py",
    }


def test_unsupported_import_form_is_refused(tmp_path, monkeypatch):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "lm.py").write_text("from glmflash import tokenizer as tok\n")
    monkeypatch.setattr(hf, "PACKAGE", tmp_path)
    monkeypatch.setattr(hf, "ROOTS", ("model/lm.py",))
    with pytest.raises(hf.ExportError, match="relative"):
        hf.flat_sources()


# -- the command's errors --------------------------------------------------------------------


@pytest.fixture
def checkpoint(tmp_path) -> Path:
    torch.manual_seed(0)
    return save_model(tmp_path / "ckpt", GLMFlash(model_config("tiny")), step=0)


def export(capsys, *args: str) -> tuple[int, str]:
    code = main(["export", *args])
    return code, capsys.readouterr().err


def test_missing_checkpoint_is_one_line(tmp_path, capsys):
    code, err = export(
        capsys, "--checkpoint", str(tmp_path / "nope"), "--out", str(tmp_path / "hf")
    )
    assert code == 2
    assert err.count("\n") == 1 and "checkpoint folder not found" in err
    assert not (tmp_path / "hf").exists()


def test_non_empty_out_needs_force(tmp_path, checkpoint, capsys):
    out = tmp_path / "hf"
    out.mkdir()
    (out / "stray.txt").write_text("keep me")
    code, err = export(capsys, "--checkpoint", str(checkpoint), "--out", str(out))
    assert code == 2 and "--force" in err and err.count("\n") == 1
    assert (out / "stray.txt").exists()
    code, _ = export(capsys, "--checkpoint", str(checkpoint), "--out", str(out), "--force")
    assert code == 0
    assert not (out / "stray.txt").exists() and (out / "config.json").is_file()


def test_out_holding_the_checkpoint_is_refused_even_with_force(tmp_path, checkpoint, capsys):
    code, err = export(capsys, "--checkpoint", str(checkpoint), "--out", str(tmp_path), "--force")
    assert code == 2 and "holds the checkpoint" in err
    assert (checkpoint / "model.safetensors").is_file()


def test_out_that_is_a_file_is_refused(tmp_path, checkpoint, capsys):
    (tmp_path / "hf").write_text("")
    code, err = export(capsys, "--checkpoint", str(checkpoint), "--out", str(tmp_path / "hf"))
    assert code == 2 and "not a folder" in err
