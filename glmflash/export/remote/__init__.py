"""Files `glmflash export` writes into a Hugging Face folder, beside a flat copy of the model's
source. Their relative imports (`from .lm import ...`) resolve only there: they are templates
kept as Python so that ruff checks them, not modules of this package."""
