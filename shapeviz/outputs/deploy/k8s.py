"""A Kubernetes manifest for the planned fleet: a Deployment (and Service) per pool, every value commented.

Disaggregated pools carry the role labels llm-d's inference scheduler (``llm-d.ai/role``) and NVIDIA Dynamo's
operator (``nvidia.com/dynamo-sub-component-type``) select prefill and decode workers by. The YAML is written
by hand because comments are the point; every string is JSON-quoted, which YAML reads as a plain string.
"""
from __future__ import annotations

import json
import re

from shapeviz.outputs.deploy.engines import (
    DEFAULT_PORT,
    IMAGES,
    TRTLLM_OPTIONS_PATH,
    EngineConfig,
    _comment,
)

NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$")
SHM_GIB = 16  # assumed: tensor-parallel workers exchange tensors through /dev/shm; the container default is 64 MiB


def _q(text: object) -> str:
    return json.dumps(str(text), ensure_ascii=False)


def _labels(app: str, cfg: EngineConfig) -> dict[str, str]:
    labels = {"app.kubernetes.io/name": app, "app.kubernetes.io/component": cfg.role,
              "app.kubernetes.io/managed-by": "shapeviz"}
    if cfg.role in ("prefill", "decode"):
        labels["llm-d.ai/role"] = cfg.role
        labels["nvidia.com/dynamo-sub-component-type"] = cfg.role
    return labels


def _deployment(app: str, cfg: EngineConfig, port: int) -> list[str]:
    name = f"{app}-{cfg.engine}-{cfg.role}"
    labels = _labels(app, cfg)
    label_lines = [f"    {k}: {_q(v)}" for k, v in labels.items()]
    out = [
        "---",
        f"# {cfg.role} pool: {cfg.replicas.value} replica(s) x {cfg.gpus_per_replica} {_comment(cfg.gpu_name)}",
        *(f"# note: {_comment(n)}" for n in cfg.notes),
        "apiVersion: apps/v1",
        "kind: Deployment",
        "metadata:",
        f"  name: {_q(name)}",
        "  labels:",
        *label_lines,
        "spec:",
        f"  replicas: {int(cfg.replicas.value)}  # {cfg.replicas.source}: {_comment(cfg.replicas.why)}",
        "  selector:",
        "    matchLabels:",
        f"      app.kubernetes.io/name: {_q(app)}",
        f"      app.kubernetes.io/component: {_q(cfg.role)}",
        "  template:",
        "    metadata:",
        "      labels:",
        *(f"        {k}: {_q(v)}" for k, v in labels.items()),
        "    spec:",
        "      containers:",
        "        - name: server",
        f"          image: {_q(IMAGES[cfg.engine])}  # assumed: the project's published serving image; pin a tested tag",
        f"          command: [{', '.join(_q(w) for w in cfg.command.split())}]",
        "          args:",
    ]
    for m in cfg.model_args():
        out.append(f"            - {_q(m)}  # {cfg.model.source}: {_comment(cfg.model.why)}")
    for a in cfg.args:
        if a.value is None:
            out.append(f"            - {_q(a.flag)}  # {a.source}: {_comment(a.why)}")
        else:
            out.append(f"            - {_q(a.flag)}")
            out.append(f"            - {_q(a.value)}  # {a.source}: {_comment(a.why)}")
    out += [f"            # {_comment(d.flag)}: {_comment(d.value)} ({d.source}: {_comment(d.why)})" for d in cfg.defaults]
    out += [
        "          ports:",
        f"            - containerPort: {port}  # assumed: the --port above",
        "          resources:",
        "            limits:",
        f"              nvidia.com/gpu: {cfg.gpus_per_replica}  # estimated: the tensor-parallel GPUs of one replica",
        "          readinessProbe:",
        "            httpGet:",
        f"              path: {_q('/health')}",
        f"              port: {port}",
        "            periodSeconds: 10",
        "          volumeMounts:",
        "            - name: shm",
        f"              mountPath: {_q('/dev/shm')}",
    ]
    if cfg.yaml_options:
        out += ["            - name: options", f"              mountPath: {_q(TRTLLM_OPTIONS_PATH.rsplit('/', 1)[0])}"]
    out += [
        "      volumes:",
        "        - name: shm",
        "          emptyDir:",
        f"            medium: {_q('Memory')}",
        f"            sizeLimit: {_q(f'{SHM_GIB}Gi')}  # assumed: room for tensor-parallel exchange buffers",
    ]
    if cfg.yaml_options:
        out += ["        - name: options", "          configMap:", f"            name: {_q(name + '-options')}"]
    return out


def _service(app: str, cfg: EngineConfig, port: int) -> list[str]:
    name = f"{app}-{cfg.engine}-{cfg.role}"
    return [
        "---",
        "apiVersion: v1",
        "kind: Service",
        "metadata:",
        f"  name: {_q(name)}",
        "spec:",
        "  selector:",
        f"    app.kubernetes.io/name: {_q(app)}",
        f"    app.kubernetes.io/component: {_q(cfg.role)}",
        "  ports:",
        f"    - port: {port}",
        f"      targetPort: {port}",
    ]


def _configmap(app: str, cfg: EngineConfig) -> list[str]:
    name = f"{app}-{cfg.engine}-{cfg.role}-options"
    body = cfg.trtllm_yaml().splitlines()
    filename = TRTLLM_OPTIONS_PATH.rsplit("/", 1)[1]
    return ["---", "apiVersion: v1", "kind: ConfigMap", "metadata:", f"  name: {_q(name)}", "data:",
            f"  {filename}: |", *(f"    {line}" for line in body)]


def manifest(configs: list[EngineConfig], app: str = "llm", port: int = DEFAULT_PORT) -> str:
    """The fleet's manifest: per pool a Deployment, a Service and (TensorRT-LLM) a ConfigMap of options."""
    if not NAME_RE.match(app):
        raise ValueError(f"app name {app!r} must be a DNS label: lower-case letters, digits and '-', at most 42 "
                         "characters, starting and ending with a letter or digit")
    if not configs:
        raise ValueError("no pools to write a manifest for")
    lines = ["# Kubernetes manifest generated by `python -m shapeviz config --k8s`.",
             "# Every value says where it came from: measured (the log), estimated (the capacity model) or assumed."]
    for cfg in configs:
        if cfg.yaml_options:
            lines += _configmap(app, cfg)
        lines += _deployment(app, cfg, port)
        lines += _service(app, cfg, port)
    return "\n".join(lines) + "\n"
