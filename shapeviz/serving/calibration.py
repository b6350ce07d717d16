"""Fit and judge the global efficiencies on published measurements (the shared ``reference/calibration`` folder).

One set of parameters for every GPU: MFU (a fraction of the measured max matmul rate), MBU, the fixed costs
per step and per layer, the all-reduce latency and link efficiency, and the memory reserve. They are fitted on
NVIDIA TensorRT-LLM measurements (max-throughput tables above all, plus batch-1 TTFT, static-batch throughput,
online serving and NIM at concurrency 1), by minimising the mean absolute log error, each kind of measurement
weighted equally. Rows the model cannot represent are kept with a ``skip`` reason rather than silently dropped.

Refit: ``python benchmarks/bench_calibration.py --write`` (rewrites ``data/efficiency.json``).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from shapeviz.physics.catalogue import DATA_DIR, get_gpu, get_model
from shapeviz.physics.steps import (
    EFFICIENCY_PATH,
    Deployment,
    Efficiency,
    decode_step_s,
    load_efficiency,
    max_throughput,
    prefill_time_s,
    prefill_work_s,
    today,
)
from shapeviz.serving.planner import Workload, _Evaluator

FILES = {
    "max_throughput": "trtllm_max_throughput_h100_a100.csv",
    "static": "trtllm_static_and_bs1_ttft_h100_a100.csv",
    "online": "trtllm_online_serving_h100.csv",
    "published": "published_h100_mlperf_nim.csv",
}

# Published rows on GPUs and precisions the fit never sees (H200, B200, GB200; NVFP4/MXFP4): judged only.
HELDOUT_PATH = DATA_DIR / "heldout_max_throughput.csv"

# TensorRT-LLM v0.9 tables say "LLaMA 7B/70B": those are Llama-2 (the doc's own footnote).
MODEL_ALIASES = {"llama 7b": "llama-2-7b", "llama 70b": "llama-2-70b"}

FITTED = ("mfu", "mbu", "step_overhead_ms", "prefill_overhead_ms", "layer_overhead_us", "sequence_overhead_us",
          "allreduce_latency_us",
          "allreduce_bus_efficiency", "memory_reserve_gib", "weight_only_efficiency")
BOUNDS: dict[str, tuple[float, float]] = {
    "mfu": (0.2, 1.0),
    "mbu": (0.3, 0.98),
    "step_overhead_ms": (0.01, 20.0),
    "prefill_overhead_ms": (0.01, 20.0),
    "layer_overhead_us": (0.1, 100.0),
    "sequence_overhead_us": (0.1, 200.0),
    "allreduce_latency_us": (1.0, 100.0),
    "allreduce_bus_efficiency": (0.05, 1.0),
    "memory_reserve_gib": (0.5, 12.0),
    "weight_only_efficiency": (0.1, 1.0),
}
KIND_WEIGHT = {"max_throughput": 2.0, "static_throughput": 1.0, "ttft_bs1": 1.0, "online_ttft": 0.5,
               "online_itl": 0.5, "nim_ttft": 0.5, "nim_itl": 0.5}
SATURATION = 0.9  # online rows count only while the served rate keeps up with the offered rate


def _model_id(name: str) -> str | None:
    key = str(name).strip().lower()
    if key in MODEL_ALIASES:
        return MODEL_ALIASES[key]
    try:
        return get_model(name).id
    except ValueError:
        return None


def _gpu_id(name: str) -> str | None:
    try:
        return get_gpu(name).id
    except ValueError:
        return None


def _precision(text: str) -> str:
    return "fp8" if "fp8" in str(text).lower() else "bf16"


def _layout(label: object, num_gpus: int, tp: int) -> tuple[int, int, bool]:
    """(GPUs per replica, ep, attention_dp) from a table's layout label: "DEP4 = attention-DP + EP over 4 GPUs"."""
    text = str(label) if isinstance(label, str) else ""
    if text.upper().startswith("DEP"):
        return int(num_gpus), int(num_gpus), True
    return int(tp), 1, False


def _native_rows(frame: pd.DataFrame) -> None:
    """gpt-oss runs its native MXFP4 checkpoint whatever the table's column says, KV 'auto' (BF16) on Hopper."""
    gptoss = frame["model_name"].astype(str).str.lower().str.startswith("gpt-oss")
    frame.loc[gptoss, "precision"] = "mxfp4"
    hopper = frame["gpu"].isin(["h100-sxm", "h200", "h100-pcie"])
    frame.loc[gptoss & hopper & frame["kv_precision"].isna(), "kv_precision"] = "bf16"


def reference_rows(reference_dir: str | Path) -> pd.DataFrame:
    """All published measurements as one tidy frame: kind, deployment, shape, measured value, skip reason."""
    folder = Path(reference_dir) / "calibration" if (Path(reference_dir) / "calibration").is_dir() else Path(reference_dir)
    missing = [f for f in FILES.values() if not (folder / f).exists()]
    if missing:
        raise ValueError(f"calibration files {missing} not found in {folder}; pass the reference folder (--reference)")
    rows: list[dict[str, Any]] = []

    mt = pd.read_csv(folder / FILES["max_throughput"])
    for r in mt.itertuples(index=False):
        skip = "pipeline parallelism is not modelled" if int(r.pp) != 1 else ""
        gpus, ep, adp = _layout(r.ep_or_dep, int(r.num_gpus), int(r.tp))
        rows.append(dict(kind="max_throughput", gpu_name=r.gpu, model_name=r.model, precision=_precision(r.precision),
                         tp=gpus, ep=ep, attention_dp=adp,
                         isl=float(r.isl), osl=float(r.osl), batch=np.nan, rate_rps=np.nan,
                         measured=float(r.throughput_tokens_per_s), unit="output tok/s per replica",
                         version=str(r.source_version), skip=skip))

    st = pd.read_csv(folder / FILES["static"])
    for r in st.itertuples(index=False):
        kind = "ttft_bs1" if r.table == "ttft_bs1" else "static_throughput"
        rows.append(dict(kind=kind, gpu_name=r.gpu, model_name=r.model, precision=_precision(r.precision),
                         tp=int(r.tp), isl=float(r.isl), osl=float(r.osl), batch=float(r.batch_size), rate_rps=np.nan,
                         measured=float(r.value), unit="ms" if kind == "ttft_bs1" else "output tok/s per GPU",
                         version="v0.9", skip=""))

    on = pd.read_csv(folder / FILES["online"])
    for r in on.itertuples(index=False):
        qps = float(r.qps_offered) if str(r.qps_offered) != "inf" else math.inf
        skip = ""
        if not math.isfinite(qps):
            skip = "unlimited offered rate: an offline run, covered by the max-throughput rows"
        elif float(r.throughput_req_s) < SATURATION * qps:
            skip = "saturated: served rate below 90% of the offered rate, the queue grows for the whole run"
        for kind, value in (("online_ttft", r.mean_ttft_ms), ("online_itl", r.mean_itl_ms)):
            rows.append(dict(kind=kind, gpu_name=r.gpu, model_name=r.model, precision=_precision(r.precision),
                             tp=int(r.tp), isl=float(r.isl), osl=float(r.osl), batch=np.nan, rate_rps=qps,
                             measured=float(value), unit="ms (mean)", version="v0.14 Triton", skip=skip))

    pub = pd.read_csv(folder / FILES["published"])
    for r in pub.itertuples(index=False):
        if r.source_id.startswith("nim") and r.metric in ("ttft_ms", "itl_ms"):
            conc = float(r.concurrency_or_batch)
            skip = "" if conc == 1 else "fixed concurrency above 1: a closed loop the open-loop model does not represent"
            rows.append(dict(kind="nim_ttft" if r.metric == "ttft_ms" else "nim_itl", gpu_name=r.gpu,
                             model_name=r.model, precision=_precision(r.precision), tp=int(float(r.tp)),
                             isl=float(r.isl), osl=float(r.osl), batch=conc, rate_rps=np.nan,
                             measured=float(r.value), unit="ms", version=str(r.engine), skip=skip))
        elif r.source_id.startswith("mlperf") and r.metric == "tokens_per_s":
            rows.append(dict(kind="mlperf", gpu_name=r.gpu, model_name=r.model, precision="fp8", tp=8,
                             isl=np.nan, osl=290.0, batch=np.nan, rate_rps=np.nan, measured=float(r.value),
                             unit="output tok/s", version="MLPerf v4.1",
                             skip="input lengths of the OpenOrca set are not in the reference file"))

    frame = _finish(pd.DataFrame(rows))
    return frame


def _finish(frame: pd.DataFrame) -> pd.DataFrame:
    """Resolve ids, fill the layout columns, mark rows the catalogue cannot represent."""
    for column, default in (("ep", 1), ("attention_dp", False), ("kv_precision", None)):
        if column not in frame:
            frame[column] = default
    frame["ep"] = frame["ep"].fillna(1).astype(int)
    frame["attention_dp"] = frame["attention_dp"].fillna(False).astype(bool)
    frame["kv_precision"] = frame["kv_precision"].astype(object).where(frame["kv_precision"].notna(), None)
    frame["gpu"] = [_gpu_id(g) for g in frame["gpu_name"]]
    frame["model"] = [_model_id(m) for m in frame["model_name"]]
    _native_rows(frame)
    frame["family"] = ["moe" if isinstance(m, str) and get_model(m).is_moe else "dense" for m in frame["model"]]
    no_model = frame["model"].isna() & (frame["skip"] == "")
    frame.loc[no_model, "skip"] = "model not in the catalogue"
    no_gpu = frame["gpu"].isna() & (frame["skip"] == "")
    frame.loc[no_gpu, "skip"] = "GPU not in the catalogue"
    return frame


def heldout_rows(path: str | Path = HELDOUT_PATH) -> pd.DataFrame:
    """Published max-throughput rows on GPUs/precisions outside the fit (``data/heldout_max_throughput.csv``)."""
    table = pd.read_csv(path)
    frame = pd.DataFrame({
        "kind": "max_throughput", "gpu_name": table["gpu"], "model_name": table["model"],
        "precision": table["precision"], "kv_precision": table["kv_precision"], "tp": table["tp"].astype(int),
        "ep": table["ep"].astype(int), "attention_dp": table["attention_dp"].astype(bool),
        "isl": table["isl"].astype(float), "osl": table["osl"].astype(float), "batch": np.nan, "rate_rps": np.nan,
        # the table is per GPU; the model predicts one replica
        "measured": table["output_tokens_per_s_per_gpu"].astype(float) * table["tp"].astype(int),
        "unit": "output tok/s per replica", "version": table["table_label"], "skip": "",
    })
    return _finish(frame)


@dataclass(frozen=True)
class _Group:
    """Rows of one deployment, as plain arrays (so a fit evaluation does no pandas work)."""

    key: tuple[str, str, str, int, int, bool, str]
    index: np.ndarray
    kind: np.ndarray
    isl: np.ndarray
    osl: np.ndarray
    batch: np.ndarray
    rate: np.ndarray


def _groups(rows: pd.DataFrame) -> list[_Group]:
    usable = rows[rows["skip"] == ""]
    out = []
    usable = usable.assign(kv=usable["kv_precision"].fillna(""))
    for key, group in usable.groupby(["gpu", "model", "precision", "tp", "ep", "attention_dp", "kv"], sort=False):
        out.append(_Group(tuple(key), rows.index.get_indexer(group.index), group["kind"].to_numpy(dtype=str),
                          group["isl"].to_numpy(dtype=float), group["osl"].to_numpy(dtype=float),
                          group["batch"].to_numpy(dtype=float), group["rate_rps"].to_numpy(dtype=float)))
    return out


def _predict_groups(groups: list[_Group], n_rows: int, eff: Efficiency) -> np.ndarray:

    out = np.full(n_rows, np.nan)
    for g in groups:
        gpu, model, precision, tp, ep, adp, kv = g.key
        try:
            # the tables were measured on TensorRT-LLM (its own, NIM's, Triton's): its sequence cap (the calibrated
            # max_batch), not vLLM's default; the efficiency is given, so no engine factor applies
            dep = Deployment(model, gpu, precision, kv or None, int(tp), eff, ep=int(ep), attention_dp=bool(adp),
                             engine="trtllm")
        except ValueError:
            out[g.index] = 0.0  # the model says the weights do not fit: an error of -100%, kept visible
            continue
        value = np.full(len(g.index), np.nan)
        kind, isl, osl = g.kind, g.isl, g.osl
        m = kind == "max_throughput"
        if m.any():
            value[m] = max_throughput(dep, isl[m], osl[m])
        m = (kind == "ttft_bs1") | (kind == "nim_ttft")
        if m.any():
            value[m] = prefill_time_s(dep, isl[m]) * 1000.0
        m = kind == "nim_itl"
        if m.any():
            value[m] = decode_step_s(dep, 1.0, isl[m] + osl[m] / 2.0) * 1000.0
        m = kind == "static_throughput"
        if m.any():
            b = g.batch[m]
            fits = dep.max_batch_kv(isl[m] + osl[m]) >= b
            cycle = b * prefill_work_s(dep, isl[m]) + osl[m] * decode_step_s(dep, b, isl[m] + osl[m] / 2.0)
            value[m] = np.where(fits, b * osl[m] / cycle / dep.tp, 0.0)
        # An evaluator per prompt shape, not per row: its build (three quarters of a fit's evaluation) reads the
        # requests' shape, never their rate, and the online tables give each shape's TTFT and ITL at several rates.
        evaluators: dict[tuple[float, float], _Evaluator] = {}
        for i in np.flatnonzero((kind == "online_ttft") | (kind == "online_itl")):
            shape = (float(isl[i]), float(osl[i]))
            if shape not in evaluators:
                evaluators[shape] = _Evaluator.build(Workload.fixed(*shape, rate_rps=float(g.rate[i])), dep)
            r = evaluators[shape].evaluate(np.array([float(g.rate[i])]), tpot_slo_s=1e9, quantiles=())
            value[i] = float(r["ttft_mean_s" if kind[i] == "online_ttft" else "tpot_p50_s"][0]) * 1000.0
        out[g.index] = value
    return out


def predict(rows: pd.DataFrame, eff: Efficiency | None = None) -> np.ndarray:
    """The model's figure for every row, in the row's unit (NaN for skipped rows, 0 if the model says it cannot run)."""
    return _predict_groups(_groups(rows), len(rows), eff or load_efficiency())


def evaluate(rows: pd.DataFrame, eff: Efficiency | None = None) -> pd.DataFrame:
    """Rows with ``predicted`` and ``error`` (predicted / measured − 1); skipped rows keep NaN."""
    result = rows.copy()
    result["predicted"] = predict(rows, eff)
    result["error"] = result["predicted"] / result["measured"] - 1.0
    return result


def _loss_function(rows: pd.DataFrame) -> Callable[[Efficiency], float]:
    """Mean |log(predicted / measured)| of each kind, kinds weighted by KIND_WEIGHT."""
    groups = _groups(rows)
    ok = rows["skip"].to_numpy(dtype=str) == ""
    meas = rows["measured"].to_numpy(dtype=float)[ok]
    kinds = rows["kind"].to_numpy(dtype=str)[ok]
    masks = [(KIND_WEIGHT.get(k, 1.0), kinds == k) for k in np.unique(kinds)]
    total_weight = sum(w for w, _ in masks)

    def loss(eff: Efficiency) -> float:
        pred = _predict_groups(groups, len(rows), eff)[ok]
        log_err = np.abs(np.log(np.maximum(pred, 1e-3 * meas) / meas))
        return sum(w * float(np.mean(log_err[k])) for w, k in masks) / total_weight

    return loss


def _has_weight_only_rows(rows: pd.DataFrame) -> bool:
    """Whether any row runs 4-bit weights on a GPU without FP4 tensor cores (what weight_only_efficiency scales)."""
    four_bit = rows["precision"].isin(["nvfp4", "mxfp4"])
    return bool(four_bit.any() and any(not get_gpu(g).has_fp4 for g in rows.loc[four_bit, "gpu"].dropna().unique()))


def _to_unit(name: str, value: float) -> float:
    lo, hi = BOUNDS[name]
    x = (value - lo) / (hi - lo)
    x = min(max(x, 1e-6), 1 - 1e-6)
    return math.log(x / (1 - x))


def _from_unit(name: str, z: float) -> float:
    lo, hi = BOUNDS[name]
    # The logistic written with tanh: exp(-z) overflows once the simplex wanders far out (|z| > 709).
    return lo + (hi - lo) * 0.5 * (1.0 + math.tanh(0.5 * z))


@dataclass(frozen=True)
class Fit:
    """A calibration result: the parameters, the loss, and the rows it saw."""

    efficiency: Efficiency
    loss: float
    rows_used: int
    gpus: tuple[str, ...]
    parameters: tuple[str, ...] = FITTED  # the ones this fit moved; the others kept their stored values


def fit(
    rows: pd.DataFrame,
    start: Efficiency | None = None,
    parameters: tuple[str, ...] = FITTED,
    max_evaluations: int = 600,
    restarts: int = 2,
    progress: Callable[[int, float], None] | None = None,
) -> Fit:
    """Fit the global efficiencies on the usable rows (Nelder–Mead on bounded, logit-scaled parameters)."""
    from scipy.optimize import (
        minimize,  # installed with scikit-learn; only the refit needs it
    )

    start = start or load_efficiency()
    usable = rows[rows["skip"] == ""]
    if usable.empty:
        raise ValueError("no usable calibration rows: check the reference folder and the catalogue ids")
    # A parameter no row depends on is a flat direction that stalls Nelder-Mead: fit it only when rows need it.
    if not _has_weight_only_rows(usable):
        parameters = tuple(p for p in parameters if p != "weight_only_efficiency")
    calls = [0]
    loss_of = _loss_function(usable)

    def objective(z: np.ndarray) -> float:
        eff = start.replace(**{name: _from_unit(name, float(v)) for name, v in zip(parameters, z)})
        loss = loss_of(eff)
        calls[0] += 1
        if progress and calls[0] % 50 == 0:
            progress(calls[0], loss)
        return loss

    z = np.array([_to_unit(name, getattr(start, name)) for name in parameters])
    for _ in range(restarts + 1):  # Nelder-Mead stalls in this many dimensions; a restart re-opens the simplex
        result = minimize(objective, z, method="Nelder-Mead",
                          options={"maxfev": max_evaluations, "xatol": 1e-3, "fatol": 1e-5, "adaptive": True})
        z = result.x
    best = start.replace(**{name: _from_unit(name, float(v)) for name, v in zip(parameters, result.x)})
    return Fit(best, float(result.fun), int(len(usable)), tuple(sorted(usable["gpu"].dropna().unique())),
               tuple(parameters))


# The held-out check's budget: what the benchmark reports and the test recomputes, so the two are one figure.
HOLDOUT_EVALUATIONS = 300
HOLDOUT_RESTARTS = 1


def neutral_start(base: Efficiency | None = None) -> Efficiency:
    """Every fitted parameter at the middle of its bounds: a start that knows nothing of any GPU's rows."""
    base = base or load_efficiency()
    return base.replace(**{name: _from_unit(name, 0.0) for name in FITTED})


def holdout(rows: pd.DataFrame, fit_gpus: list[str], check_gpus: list[str],
            max_evaluations: int = HOLDOUT_EVALUATIONS, restarts: int = HOLDOUT_RESTARTS) -> tuple[float, pd.DataFrame]:
    """Fit on ``fit_gpus`` only, from a neutral start, and judge on ``check_gpus``: (median |error|, their rows).

    The start matters: starting from the stored parameters (fitted on every GPU) would leak the held-out rows
    into the fit through the starting point.
    """
    result = fit(rows[rows["gpu"].isin(fit_gpus)], start=neutral_start(), max_evaluations=max_evaluations,
                 restarts=restarts)
    judged = evaluate(rows[rows["gpu"].isin(check_gpus)], result.efficiency)
    ok = judged[judged["skip"] == ""]
    return float(ok["error"].abs().median()), judged


def summarize(evaluated: pd.DataFrame) -> pd.DataFrame:
    """Median and mean absolute error, and row count, per GPU and kind of measurement (usable rows only)."""
    ok = evaluated[evaluated["skip"] == ""].assign(abs_error=lambda d: d["error"].abs())
    table = ok.groupby(["gpu", "kind"])["abs_error"].agg(["count", "median", "mean"]).reset_index()
    per_gpu = ok.groupby("gpu")["abs_error"].agg(["count", "median", "mean"]).reset_index().assign(kind="all")
    overall = pd.DataFrame([{"gpu": "all", "kind": "all", "count": len(ok), "median": ok["abs_error"].median(),
                             "mean": ok["abs_error"].mean()}])
    return pd.concat([table, per_gpu, overall], ignore_index=True)


def within(evaluated: pd.DataFrame, factor: float = 2.0) -> float:
    """Share of usable rows whose prediction is within ``factor``× of the measurement."""
    ok = evaluated[evaluated["skip"] == ""]
    ratio = ok["predicted"] / ok["measured"]
    return float(((ratio >= 1.0 / factor) & (ratio <= factor)).mean()) if len(ok) else float("nan")


def by_family_precision(evaluated: pd.DataFrame, by: tuple[str, ...] = ("family", "precision")) -> pd.DataFrame:
    """Rows, median and mean |error|, median signed error and share within 2× per group (usable rows only)."""
    ok = evaluated[evaluated["skip"] == ""].assign(abs_error=lambda d: d["error"].abs(),
                                                   in2x=lambda d: (d["predicted"] / d["measured"]).between(0.5, 2.0))
    table = ok.groupby(list(by)).agg(rows=("error", "size"), median_abs=("abs_error", "median"),
                                     mean_abs=("abs_error", "mean"), median_signed=("error", "median"),
                                     within_2x=("in2x", "mean"))
    return table.reset_index()


def judged_summary(judged: pd.DataFrame) -> dict[str, float]:
    """Headline figures on the held-out rows: MoE or 4-bit rows, and dense FP8 rows."""
    ok = judged[judged["skip"] == ""]
    target = ok[(ok["family"] == "moe") | ok["precision"].isin(["nvfp4", "mxfp4"])]
    dense_fp8 = ok[(ok["family"] == "dense") & (ok["precision"] == "fp8")]
    return {
        "moe_or_fp4_rows": int(len(target)),
        "moe_or_fp4_median_abs_error": round(float(target["error"].abs().median()), 4),
        "moe_or_fp4_within_2x": round(within(target), 4),
        "dense_fp8_rows": int(len(dense_fp8)),
        "dense_fp8_median_abs_error": round(float(dense_fp8["error"].abs().median()), 4),
    }


def write_efficiency(result: Fit, evaluated: pd.DataFrame, holdout: dict[str, float],
                     path: Path = EFFICIENCY_PATH, judged: dict[str, float] | None = None) -> None:
    """Store the fitted parameters with the date, the data used, the errors and how to refit."""
    e = result.efficiency
    ok = evaluated[evaluated["skip"] == ""]
    priors = PRIOR_SOURCES
    parameters: dict[str, Any] = {}
    for name, value in e.to_dict().items():
        entry: dict[str, Any] = {"value": round(float(value), 4) if name != "max_batch" else int(value),
                                 "unit": UNITS[name]}
        if name in result.parameters:
            entry["source"] = f"fitted {today()} on {result.rows_used} published measurements; prior: {priors[name]}"
            entry["bounds"] = list(BOUNDS[name])
        elif name in FITTED:  # kept from an earlier fit: its stored source says when and on what
            entry["source"] = e.sources.get(name) or priors[name]
            entry["bounds"] = list(BOUNDS[name])
        else:
            entry["source"] = priors[name]
        parameters[name] = entry
    document = {
        "_about": ("Global efficiencies of the shapeviz step-time model (shapeviz/physics/steps.py), one set for "
                   "every GPU. 'fitted' parameters come from shapeviz/serving/calibration.py; the others are "
                   "published settings or assumptions, each with its source."),
        "fitted_on": today(),
        "judged_on": "data/heldout_max_throughput.csv (H200, B200, GB200; NVFP4/MXFP4): never used by the fit",
        "how_to_refit": "python benchmarks/bench_calibration.py --write  (reads ../shared/reference or --reference DIR)",
        "data": {
            "files": sorted(FILES.values()),
            "rows_used": int(len(ok)),
            "gpus": list(result.gpus),
            "kinds": {k: int(v) for k, v in ok["kind"].value_counts().sort_index().items()},
            "objective": "mean |log(predicted / measured)| per kind, kinds weighted " + json.dumps(KIND_WEIGHT),
        },
        "errors": {
            "median_abs_error_all": round(float(ok["error"].abs().median()), 4),
            "median_abs_error_by_gpu": {g: round(float(v), 4) for g, v in ok.groupby("gpu")["error"].apply(lambda s: s.abs().median()).items()},
            "holdout_median_abs_error": {k: round(float(v), 4) for k, v in holdout.items()},
            "holdout_how": ("fit on the named GPUs only, from a neutral start (every fitted parameter at the middle "
                            "of its bounds), Nelder-Mead with the budget of shapeviz.serving.calibration.holdout; "
                            "judged on the GPUs left out"),
            "judged_on_unseen_gpus": judged or {},
        },
        "parameters": parameters,
    }
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(document, fh, indent=2)
        fh.write("\n")
    load_efficiency.cache_clear()


UNITS = {
    "mfu": "fraction of the GPU's measured max achievable matmul FLOPS (MAMF) at the compute precision",
    "mbu": "fraction of the GPU's measured max achievable HBM bandwidth (spec x mamb_fraction_default if unmeasured)",
    "step_overhead_ms": "ms per decode iteration",
    "prefill_overhead_ms": "ms per prefill pass (latency only)",
    "layer_overhead_us": "us per layer per iteration",
    "sequence_overhead_us": "us per sequence per iteration",
    "allreduce_latency_us": "us per all-reduce per doubling of TP",
    "allreduce_bus_efficiency": "fraction of the scale-up link bandwidth",
    "memory_reserve_gib": "GiB per GPU (runtime, NCCL, activations)",
    "kv_fraction_offline": "fraction of free memory",
    "kv_fraction_serving": "fraction of free memory",
    "max_batch": "concurrent sequences",
    "kv_transfer_gbps": "GB/s between a prefill and a decode replica",
    "mamf_fraction_default": "MAMF / dense spec peak",
    "mamb_fraction_default": "measured max achievable bandwidth / spec bandwidth",
    "expert_imbalance": "busiest expert-parallel rank's token load / the mean",
    "weight_only_efficiency": "fraction of the BF16 matmul rate reached by weight-only (dequantise-in-kernel) matmuls",
}

PRIOR_SOURCES = {
    "mfu": "0.40-0.50 of FP8 spec peak end-to-end on H100, 0.6-0.7 of BF16 on A100 (shared physics reference 4.2); "
           "Vidur GEMM profiles 69-76% of BF16 spec",
    "mbu": "fraction of the measured max bandwidth; end-to-end 0.5-0.6 of spec at small batch vs 0.85-0.9 for the "
           "GEMM weight stream (physics reference 4.1, 4.3)",
    "step_overhead_ms": "engine iteration overhead; no direct measurement (fitted)",
    "prefill_overhead_ms": "assumption: a context pass has extra fixed cost (not CUDA-graphed, KV block setup); fitted",
    "layer_overhead_us": "aiconfigurator mem_empirical_constant_latency 3 us per op",
    "sequence_overhead_us": "assumption: per-sequence work of each iteration (sampling over the vocabulary, scheduling); fitted",
    "allreduce_latency_us": "microsoft/vidur NCCL all-reduce on DGX-H100: 2 GPUs 7 us, 8 GPUs 23-37 us for small messages",
    "allreduce_bus_efficiency": "microsoft/vidur: 64 MiB all-reduce at TP8 = 208 GB/s algorithm bandwidth (~0.8 of NVLink4 bus)",
    "memory_reserve_gib": "aiconfigurator other_mem 3.5 GB plus NCCL buffers 0.34-0.39 GB",
    "kv_fraction_offline": "TensorRT-LLM perf-overview: kv_cache_free_gpu_mem_fraction 0.95 in the max-throughput runs",
    "kv_fraction_serving": "TensorRT-LLM default kv_cache_free_gpu_mem_fraction 0.90",
    "max_batch": "assumption: engine cap of 2048 concurrent sequences (TensorRT-LLM's usual max_batch_size); not fitted",
    "kv_transfer_gbps": "Mooncake Transfer Engine: 87 GB/s on 4x200 Gbps RoCE (kvcache-ai/Mooncake README @3b5a5941)",
    "mamb_fraction_default": "ai-dynamo/aiconfigurator systems/*.yaml mem_bw_empirical_scaling_factor 0.8 @095f58a5",
    "mamf_fraction_default": "assumption: median MAMF/spec of the measured GPUs (H100 0.80/0.71, A100 0.87, B200 0.78)",
    "expert_imbalance": "assumption, not fitted: the busiest EP rank gets 20% more tokens than the mean, the low end of "
                        "the 1.2-1.8 max/mean routing skew quoted for real workloads (impala-blog.pages.dev EPLB widget); "
                        "NVIDIA/TensorRT-LLM docs/source/blogs/tech_blog/blog4_Scaling_Expert_Parallelism_in_TensorRT-LLM.md "
                        "shows EP-rank imbalance is common and dataset dependent; the published benchmarks use random tokens",
    "weight_only_efficiency": "MXFP4 on Hopper runs W4A16 (TensorRT-LLM QuantAlgo W4A16_MXFP4, Triton MoE backend per the "
                              "perf-overview llm_options): weights converted to BF16 in registers before the tensor cores; "
                              "only the H100 gpt-oss rows constrain it",
}
