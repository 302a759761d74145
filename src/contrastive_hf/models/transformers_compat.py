"""Shims for transformers 5.x releases older than the newest one the package is tested with.

Each shim names the release that made it unnecessary, so that it can be removed with the lower bound.
"""

from __future__ import annotations

from transformers import AutoConfig, PreTrainedConfig

try:  # transformers >= 5.20: composite configs declare `sub_configs_defaults` and the base class builds them
    from transformers.configuration_utils import SubConfigSpec
except ImportError:  # transformers < 5.20: composite configs list `sub_configs` and build them in __post_init__
    SubConfigSpec = None


def build_sub_config(value, config_class=AutoConfig, model_type: str | None = None, optional: bool = False):
    """What transformers >= 5.20's `SubConfigSpec.create_subconfig` does, for older releases.

    `value` is a config (kept as it is), a dict (with `model_type` when `config_class` is `AutoConfig`; `model_type`
    when it has none) or None (the default config; None stays None when `optional`).
    """
    if isinstance(value, PreTrainedConfig) or (value is None and optional):
        return value
    if value is not None and not isinstance(value, dict):
        raise TypeError(f"A sub-config must be a dict, a PreTrainedConfig or None, got {type(value)}.")
    value = dict(value or {})
    if config_class is AutoConfig:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        config_class = CONFIG_MAPPING[value.get("model_type", model_type)]
    return config_class(**value)


__all__ = ["SubConfigSpec", "build_sub_config"]
