"""From a capacity plan to a running fleet: engine flags (vLLM, SGLang, TensorRT-LLM), a Kubernetes manifest
and load-test commands, every value carrying where it came from (measured / estimated / assumed)."""
from __future__ import annotations

from shapeviz.outputs.deploy.build import (
    DeploymentBundle,
    deployment_bundle,
    longest_context,
    prefix_signal,
)
from shapeviz.outputs.deploy.engines import EngineConfig, engine_configs
from shapeviz.outputs.deploy.flags import (
    check_args,
    check_command,
    check_yaml_keys,
    load_flags,
)
from shapeviz.outputs.deploy.settings import ServingSettings, Setting, serving_settings

__all__ = [
    "DeploymentBundle", "EngineConfig", "ServingSettings", "Setting", "check_args", "check_command",
    "check_yaml_keys", "deployment_bundle", "engine_configs", "load_flags", "longest_context", "prefix_signal",
    "serving_settings",
]
