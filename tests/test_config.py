import pytest

from glmflash.config import ConfigError, ModelConfig, model_config


def test_presets():
    big = model_config("25m")
    assert (big.d_model, big.n_heads, big.n_layers, big.context) == (192, 6, 12, 192)
    assert big.layer_kinds == "LLLSLLLSLLLS"
    assert (big.n_experts, big.expert_hidden, big.top_k, big.n_shared) == (8, 384, 2, 1)
    assert big.n_streams == 4
    assert model_config("tiny").layer_kinds == "LLLS"


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(n_heads=5), "n_heads"),
        (dict(top_k=9), "top_k"),
        (dict(linear_kind="rnn"), "linear_kind"),
        (dict(layer_pattern="LLX"), "layer_pattern"),
        (dict(d_model=0), "d_model"),
        (dict(stream_mixer="x"), "stream_mixer"),
    ],
)
def test_invalid_fields_are_named(overrides, field):
    with pytest.raises(ConfigError, match=field):
        model_config("tiny", **overrides)


def test_unknown_preset_and_option():
    with pytest.raises(ConfigError, match="preset"):
        model_config("huge")
    with pytest.raises(ConfigError, match="bogus"):
        model_config("tiny", bogus=1)


def test_dict_round_trip():
    cfg = model_config("tiny", linear_kind="delta")
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize(
    "field, value",
    [("schedule", "linear"), ("row_start", "middle"), ("ladder_constants", "huge")],
)
def test_pretraining_choices_are_checked(field, value):
    from glmflash.config import PretrainConfig

    with pytest.raises(ConfigError, match=f"{field} must be one of"):
        PretrainConfig(**{field: value})
    with pytest.raises(ConfigError, match="decay_fraction"):
        PretrainConfig(decay_fraction=0.0)


def choice_fields():
    """(config class, field) for every setting declared with choices, in every stage's config."""
    import dataclasses

    from glmflash.config import PretrainConfig, RLConfig, Sampling, VisionConfig

    return [
        (cls, f)
        for cls in (PretrainConfig, RLConfig, VisionConfig, Sampling)
        for f in dataclasses.fields(cls)
        if f.metadata.get("choices")
    ]


@pytest.mark.parametrize(("cls", "field"), choice_fields(), ids=lambda x: getattr(x, "name", x))
def test_every_declared_choice_is_enforced_and_every_choice_builds(cls, field):
    """A value outside a setting's declared choices is refused, naming the field; each
    declared choice builds (with the settings it needs: edge sampling needs rloo)."""
    with pytest.raises(Exception, match=f"{field.name} must be one of") as raised:
        cls(**{field.name: "no-such-choice"})
    assert isinstance(raised.value, (ValueError, RuntimeError))
    needs = {"train_scope": {"align_steps": 1}}.get(field.name, {})
    for choice in field.metadata["choices"]:
        extra = {"sampler": "uniform"} if (field.name, choice) == ("objective", "sft") else {}
        assert getattr(cls(**{field.name: choice, **needs, **extra}), field.name) == choice
