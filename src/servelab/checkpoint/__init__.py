"""Checkpoint reading: safetensors headers (local, sharded, remote), validation, configs.

The reading layer (:mod:`.safetensors_format`, :mod:`.sources`, :mod:`.configs`) never
touches tensor data and never unpickles anything.
"""

from servelab.checkpoint.configs import quantization_config, text_config, vision_config
from servelab.checkpoint.safetensors_format import (
    DTYPE_BITS,
    MAX_HEADER_LOCAL,
    MAX_HEADER_REMOTE,
    ShardHeader,
    TensorEntry,
    parse_header,
)
from servelab.checkpoint.sources import CheckpointSource, SourceWarning, load_checkpoint

__all__ = [
    "DTYPE_BITS",
    "MAX_HEADER_LOCAL",
    "MAX_HEADER_REMOTE",
    "CheckpointSource",
    "ShardHeader",
    "SourceWarning",
    "TensorEntry",
    "load_checkpoint",
    "parse_header",
    "quantization_config",
    "text_config",
    "vision_config",
]
