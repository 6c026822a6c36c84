"""A checkpoint as a self-contained Hugging Face model folder.

    config.json             every ModelConfig field, model_type "glmflash", auto_map
    model.safetensors       the weights under "model.", the tied head stored once (the embedding)
    generation_config.json  eos/pad ids, and the ids our generation never emits suppressed
    tokenizer_config.json   the byte tokenizer, for AutoTokenizer
    *_glmflash.py           the transformers classes (copied from remote/ here)
    lm.py, model.py, ...    the model's source, flat: `from glmflash.a.b import` -> `from .b import`

transformers (>= 5.10.4; older versions copy only direct imports) copies a folder's relatively
imported files into its module cache, so with `trust_remote_code=True` the model loads where
glmflash is not installed. The source to copy is
found by following imports from the files the wrapper imports, so a new module is never left
out, and the folder is checked to be closed (every relative import present, no glmflash import
left) before it is committed. Exporting needs no transformers; loading does (the `hf` extra).
"""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path
from typing import Any

from safetensors.torch import save_file

from glmflash import tokenizer as tok
from glmflash.checkpoint import TIED, atomic_dir, commit_dir, load_model
from glmflash.generate import allowed_mask
from glmflash.model.lm import GLMFlash

PACKAGE = Path(__file__).resolve().parents[1]  # glmflash/
REMOTE = Path(__file__).resolve().parent / "remote"
# Our source the wrapper files import; what these import is followed from here.
ROOTS = ("model/lm.py", "model/rope.py", "config/model.py", "tokenizer.py")
PREFIX = "model."  # GlmFlashForCausalLM keeps the GLMFlash as `self.model`
HF_NAMES = {"top_k": "moe_top_k"}  # mirrors RENAMED in remote/configuration_glmflash.py
ABSOLUTE = re.compile(r"^(\s*)from glmflash\.(?:\w+\.)*(\w+) import", re.MULTILINE)
RELATIVE = re.compile(r"^\s*from \.(\w+) import", re.MULTILINE)


class ExportError(RuntimeError):
    """An export that cannot be written: bad destination, or source that cannot be made flat."""


def _glmflash_imports(tree: ast.AST) -> list[str]:
    """Every glmflash module a file imports, wherever the import statement is."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "glmflash"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "glmflash":
                found.append(node.module)
    return found


def flat_sources() -> dict[str, str]:
    """{flat file name: source with relative imports} for ROOTS and all they import."""
    out: dict[str, str] = {}
    origin: dict[str, Path] = {}
    todo = [PACKAGE / r for r in ROOTS]
    while todo:
        path = todo.pop()
        if origin.get(path.name) == path:
            continue
        if path.name in origin:
            raise ExportError(
                f"two source files would both be {path.name}: {origin[path.name]} and {path}"
            )
        source = path.read_text()
        flat = ABSOLUTE.sub(r"\1from .\2 import", source)
        if _glmflash_imports(ast.parse(flat)):  # `import glmflash.x`, `from glmflash import x`
            raise ExportError(f"{path}: only `from glmflash.a.b import name` can be made relative")
        for module in _glmflash_imports(ast.parse(source)):
            dep = PACKAGE.joinpath(*module.split(".")[1:]).with_suffix(".py")
            if not dep.is_file():
                raise ExportError(f"{path} imports {module}, which is not a module file")
            todo.append(dep)
        origin[path.name] = path
        rel = path.relative_to(PACKAGE.parent)
        out[path.name] = f"# {rel}, copied by `glmflash export` with relative imports.\n{flat}"
    return out


def check_closed(folder: Path) -> None:
    """Every relative import of the folder's Python files is a file there (transformers
    copies exactly these), and none imports glmflash."""
    for path in folder.glob("*.py"):
        source = path.read_text()
        if _glmflash_imports(ast.parse(source)):
            raise ExportError(f"{path.name} still imports glmflash")
        for name in RELATIVE.findall(source):
            if not (folder / f"{name}.py").is_file():
                raise ExportError(f"{path.name} imports .{name}, which is not in the folder")


def hf_config(model: GLMFlash) -> dict[str, Any]:
    """config.json: our fields (top_k renamed) and what transformers needs to find the classes."""
    return {
        "architectures": ["GlmFlashForCausalLM"],
        "model_type": "glmflash",
        "auto_map": {
            "AutoConfig": "configuration_glmflash.GlmFlashConfig",
            "AutoModelForCausalLM": "modeling_glmflash.GlmFlashForCausalLM",
        },
        **{HF_NAMES.get(k, k): v for k, v in model.cfg.to_dict().items()},
        "bos_token_id": tok.BOS,
        "eos_token_id": tok.EOS,
        "pad_token_id": tok.PAD,
        "tie_word_embeddings": True,
        "use_cache": False,
        "dtype": "float32",
    }


def generation_config(model: GLMFlash) -> dict[str, Any]:
    """Greedy, no cache, stop at EOS, and every id outside `allowed_mask` suppressed (pad,
    bos, sep, vision tokens, ids past the tokenizer): what glmflash's `generate` does, short of
    its stop at the end of a function body."""
    allowed = allowed_mask(model.cfg.vocab_size, model.embedding.weight.device)
    return {
        "bos_token_id": tok.BOS,
        "eos_token_id": tok.EOS,
        "pad_token_id": tok.PAD,
        "do_sample": False,
        "use_cache": False,
        "suppress_tokens": (~allowed).nonzero().flatten().tolist(),
    }


def tokenizer_config(model: GLMFlash) -> dict[str, Any]:
    return {
        "tokenizer_class": "GlmFlashTokenizer",
        "auto_map": {"AutoTokenizer": ["tokenization_glmflash.GlmFlashTokenizer", None]},
        "model_max_length": model.cfg.context,
    }


def write_hf(folder: Path, model: GLMFlash) -> None:
    """Write the Hugging Face files of `model` into an existing, empty folder."""
    state = {
        PREFIX + k: v.detach().cpu().contiguous()
        for k, v in model.state_dict().items()
        if k not in TIED
    }
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    for name, data in (
        ("config.json", hf_config(model)),
        ("generation_config.json", generation_config(model)),
        ("tokenizer_config.json", tokenizer_config(model)),
    ):
        (folder / name).write_text(json.dumps(data, indent=2) + "\n")
    for name, source in flat_sources().items():
        (folder / name).write_text(source)
    for path in REMOTE.glob("*_glmflash.py"):
        shutil.copyfile(path, folder / path.name)
    check_closed(folder)


def export_hf(checkpoint: str | Path, out: str | Path, force: bool = False) -> Path:
    """Export a checkpoint folder to `out`, atomically. An existing non-empty `out` is replaced
    only with `force`, and never when it holds the checkpoint."""
    out, ckpt = Path(out), Path(checkpoint)
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out} exists and is not a folder")
    if out.exists() and ckpt.resolve().is_relative_to(out.resolve()):
        raise ExportError(f"{out} holds the checkpoint {checkpoint}: choose another --out")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ExportError(f"{out} exists and is not empty: pass --force to replace it")
    model, _ = load_model(ckpt)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = atomic_dir(out)
    try:
        write_hf(tmp, model)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    commit_dir(tmp, out)
    return out
