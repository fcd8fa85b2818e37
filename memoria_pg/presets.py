"""Applying a named preset (routing.PRESETS) to a configuration."""

from __future__ import annotations

from .config import Config
from .routing import preset as get_preset


def apply_preset(config: Config, name: str) -> tuple[Config, bool]:
    """The configuration with the preset's workers and cross-encoder flag, and its ranking switch."""
    preset = get_preset(name)
    changed = config.replace(workers_to_use=tuple(preset.workers),
                             enable_cross_encoder=preset.cross_encoder and bool(config.cross_encoder_model))
    return changed, preset.ranking
