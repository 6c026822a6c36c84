"""Experiments: a grid of conditions x paired seeds, each run a pure function of the two.

Adding an experiment is one small Python file in this package (every module of
`glmflash.experiments` is imported when the registry is first asked for a name), or any
importable module or .py file passed to `glmflash experiment NAME --module ...`:

    # glmflash/experiments/my_idea.py
    from glmflash.experiments.registry import Experiment, register

    def run(config: dict, seed: int) -> dict:
        # Train and evaluate one arm with one seed. The same seed must give both arms the
        # same initialisation and the same evaluation set: that is what makes them paired.
        accuracy = ...
        return {"accuracy": accuracy,                       # numbers: the run's metrics
                "curves": {"accuracy": [[50, 0.31], [100, 0.44]]}}  # optional [step, value]

    register(Experiment(
        name="my-idea",
        conditions={"baseline": {"lr": 1e-3}, "treatment": {"lr": 3e-3}},
        seeds=tuple(range(10)),
        run=run,                       # a module-level function (it is sent to worker processes)
        metric="accuracy",             # the primary metric: its comparisons get Holm's correction
        comparisons=[("baseline", "treatment")],  # (a, b): differences are b - a
    ))

Then `glmflash experiment my-idea --out results --workers 2` runs the grid (one JSON file per
run under results/my-idea/runs/) and `glmflash report results` writes
results/my-idea/report.md with the statistics and plots.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RunFn = Callable[[dict[str, Any], int], dict[str, Any]]

# Modules of this package that hold machinery, not experiments.
_MACHINERY = {"registry", "runner", "report", "small_lm", "rl_arm"}


@dataclass(frozen=True)
class Experiment:
    """A named grid: `run(conditions[c], seed)` for every condition c and seed.

    `secondary` metrics are reported beside the primary one; under --quick, `quick` is merged
    into every condition's configuration and only `quick_seeds` are run.
    """

    name: str
    conditions: dict[str, dict[str, Any]]
    seeds: tuple[int, ...]
    run: RunFn
    metric: str
    comparisons: list[tuple[str, str]]
    description: str = ""
    secondary: tuple[str, ...] = ()
    quick: dict[str, Any] = field(default_factory=dict)
    quick_seeds: tuple[int, ...] = (0, 1, 2)

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name or self.name.startswith("."):
            raise ValueError(f"experiment name must be a plain folder name, got {self.name!r}")
        if not self.conditions:
            raise ValueError(f"experiment {self.name!r} has no conditions")
        bad = [c for c in self.conditions if not c or "/" in c or "__seed" in c]
        if bad:
            raise ValueError(f"condition names must be plain and must not contain '__seed': {bad}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"experiment {self.name!r} needs distinct seeds, got {self.seeds}")
        for a, b in self.comparisons:
            missing = {a, b} - set(self.conditions)
            if missing:
                raise ValueError(
                    f"comparison ({a}, {b}) names unknown condition(s) {sorted(missing)}"
                )

    def condition_config(
        self, condition: str, quick: bool = False, overrides: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The condition's settings, then `quick` (under --quick), then `overrides` (--set),
        which may only name settings the condition has."""
        config = {**self.conditions[condition], **(self.quick if quick else {})}
        unknown = sorted(set(overrides or {}) - set(config))
        if unknown:
            raise ValueError(
                f"experiment {self.name!r} has no setting {', '.join(unknown)}; "
                f"its settings: {', '.join(sorted(config))}"
            )
        return {**config, **(overrides or {})}

    def describe(self) -> dict[str, Any]:
        """The definition as JSON-ready data (what a report needs without importing it)."""
        return {
            "name": self.name,
            "description": self.description,
            "metric": self.metric,
            "secondary": list(self.secondary),
            "conditions": self.conditions,
            "seeds": list(self.seeds),
            "comparisons": [list(c) for c in self.comparisons],
            "run": f"{self.run.__module__}.{self.run.__qualname__}",
        }


_REGISTRY: dict[str, Experiment] = {}
_builtins_loaded = False


def register(experiment: Experiment) -> Experiment:
    """Add an experiment; a second, different experiment under the same name is an error."""
    known = _REGISTRY.get(experiment.name)
    if known is not None and known.describe() != experiment.describe():
        raise ValueError(f"an experiment named {experiment.name!r} is already registered")
    _REGISTRY[experiment.name] = experiment
    return experiment


def _load_builtins() -> None:
    global _builtins_loaded
    if _builtins_loaded:
        return
    package = importlib.import_module("glmflash.experiments")
    for info in pkgutil.iter_modules(package.__path__):
        if info.name not in _MACHINERY and not info.name.startswith("_"):
            importlib.import_module(f"glmflash.experiments.{info.name}")
    _builtins_loaded = True


def load_module(spec: str) -> None:
    """Import a dotted module name or a .py file, for the experiments it registers.

    A file's folder is put on sys.path so that worker processes can import it by name too.
    """
    path = Path(spec)
    if spec.endswith(".py"):
        if not path.is_file():
            raise ValueError(f"no such file: {spec}")
        sys.path.insert(0, str(path.resolve().parent))
        spec = path.stem
    try:
        importlib.import_module(spec)
    except ImportError as e:
        raise ValueError(f"cannot import {spec!r}: {e}") from None


def names() -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY)


def get(name: str) -> Experiment:
    _load_builtins()
    if name not in _REGISTRY:
        raise ValueError(f"unknown experiment {name!r}; choose from {', '.join(names())}")
    return _REGISTRY[name]
