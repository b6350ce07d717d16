"""The simulator against MLPerf Inference (datacenter, Llama-2-70B): predicted vs published, row by row.

    python benchmarks/bench_mlperf.py [--rows ROW_ID ...] [--fit] [--write]

Each published row of ``data/mlperf_llama2_70b.csv`` (8 or fewer accelerators of one system, its engine and
precision) is predicted with the tool's defaults: the deployment is Llama-2-70B at the row's precision on the
smallest TP that fits (``smallest_tp``), replicated over the system's accelerators, run by the row's engine (its
efficiency from ``data/engine_efficiency.csv``), every other setting the simulator's default (chunked prefill,
8,192 tokens per iteration, the calibrated sequence cap, KV pool 90% of free memory).

- **Offline**: 3,072 requests per replica offered at t = 0; the throughput is the output tokens of the requests
  that finish between the 10th and the 90th percentile of completion times over that span (the steady state a
  40-minute MLPerf run measures, without the ramp-up and the drain of a short replay).
- **Server / Interactive**: the highest Poisson rate whose simulated p99 TTFT and p99 TPOT meet MLPerf's limits
  (2,000 / 200 ms; Interactive 450 / 40 ms), bisected on 600 s of arrivals (MLPerf's own least run length,
  LoadGen's min_duration; at least 2,000 requests); the prediction is that rate × the mean output tokens. On
  120 s a rate past the fleet's capacity still met the limits: with TensorRT-LLM's guaranteed-no-evict admission
  a KV pool of hundreds of OpenOrca sequences takes the excess into the running batch, so no request waits and
  TPOT creeps up too slowly to pass 200 ms before the run ends (benchmarks/README.md, issue 36 integration).

Requests: the input lengths and reference output lengths of a seeded sample of 4,096 of the 24,576 OpenOrca
samples (``data/mlperf_openorca_lengths.csv``: mean input 225 tokens, p50 155, max 998); the output lengths are
scaled to the mean the row's run generated (its tokens/s over samples/s, 272–297; 290 where the summary gives no
sample rate), since MLPerf counts the tokens Llama-2-70B generates, not the reference answers'.

``--fit`` refits the factors of ``data/engine_efficiency.csv`` on the rows marked ``fitted`` (per accelerator
family × engine × precision: its Offline row for compute, its Interactive row, where there is one, for memory; see
``fit``) and, with ``--write``, writes them into that file. The script
prints the error table as markdown (benchmarks/README.md, "MLPerf Inference"). MLPerf v5.1 and newer are held out:
no row of them is in the data file, none was looked at while choosing.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shapeviz.datadir import DATA_DIR  # noqa: E402
from shapeviz.physics.engines import ENGINE_EFFICIENCY_PATH, engine_efficiency  # noqa: E402
from shapeviz.physics.steps import Deployment, engine_scaled, load_efficiency, smallest_tp  # noqa: E402
from shapeviz.serving.mlperf import DEFAULT_MEAN_OUTPUT, LIMITS_MS, openorca_requests  # noqa: E402
from shapeviz.serving.simulator import simulate  # noqa: E402

ROWS_PATH = DATA_DIR / "mlperf_llama2_70b.csv"
MODEL = "llama-2-70b"
OFFLINE_PER_REPLICA = 3072
SERVER_SECONDS = 600.0
BISECTION_STEPS = 9


def published_rows() -> pd.DataFrame:
    """The published MLPerf rows with their source and role (fitted / judged)."""
    return pd.read_csv(ROWS_PATH, dtype={"public_id": str})


def mean_output(row: pd.Series) -> float:
    """Mean generated tokens per sample of the run (tokens/s ÷ samples/s), else 290."""
    s = row.get("samples_per_s")
    return float(row["tokens_per_s"]) / float(s) if isinstance(s, float) and s > 0 else DEFAULT_MEAN_OUTPUT


def deployment(row: pd.Series, scales: tuple[float, float] | None = None) -> tuple[Deployment, int]:
    """The row's replica at the tool's defaults and how many replicas its accelerators hold.

    ``scales``: (compute, memory) factors to try instead of the engine's row (a fit).
    """
    gpu, precision, engine = str(row["gpu"]), str(row["precision"]), str(row["engine"])
    tp = smallest_tp(MODEL, gpu, precision)
    base = load_efficiency()
    if scales is None:
        # the engine's factors of the row's own software release (its MLPerf round) where one was fitted, else the
        # newest release's
        eff = engine_scaled(base, gpu, engine, precision, str(row["round"]))
    else:
        eff = base.replace(mfu=min(base.mfu * scales[0], 1.0), mbu=min(base.mbu * scales[1], 1.0))
    dep = Deployment(MODEL, gpu, precision, None, tp, eff, engine=engine)
    return dep, max(int(row["gpus"]) // tp, 1)


def offline_tokens_per_s(dep: Deployment, replicas: int, mean_out: float) -> float:
    """Steady output tokens/s with every request offered at once (10th–90th percentile of completions)."""
    req = openorca_requests(OFFLINE_PER_REPLICA * replicas, mean_out)
    r = simulate(req, dep, arrivals="trace", replicas=replicas).requests
    done = (r["arrival_s"] + r["e2e_ms"] / 1e3).to_numpy()
    lo, hi = np.percentile(done, [10, 90])
    inside = (done >= lo) & (done <= hi)
    return float(r.loc[inside, "output_tokens"].sum() / max(hi - lo, 1e-9))


def meets(dep: Deployment, replicas: int, rate: float, mean_out: float, limits: tuple[float, float]) -> bool:
    """Whether Poisson arrivals at ``rate`` meet the p99 TTFT and TPOT limits over MLPerf's ten minutes."""
    n = max(2000, int(rate * SERVER_SECONDS))
    arrival = np.cumsum(np.random.default_rng(1).exponential(1.0 / rate, n))
    r = simulate(openorca_requests(n, mean_out, arrival), dep, arrivals="trace", replicas=replicas).requests
    ttft, tpot = np.nanpercentile(r["ttft_ms"], 99), np.nanpercentile(r["tpot_ms"], 99)
    return bool(ttft <= limits[0] and tpot <= limits[1])


def server_tokens_per_s(dep: Deployment, replicas: int, mean_out: float, limits: tuple[float, float],
                        offline: float) -> float:
    """Highest Poisson rate meeting the limits (bisected up to 1.5× the Offline rate) × the mean output."""
    hi = 1.5 * offline / mean_out   # room above Offline, so that Offline >= Server is measured, not imposed
    lo = hi / 64.0
    if not meets(dep, replicas, lo, mean_out, limits):
        return 0.0
    if meets(dep, replicas, hi, mean_out, limits):
        return hi * mean_out
    for _ in range(BISECTION_STEPS):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if meets(dep, replicas, mid, mean_out, limits) else (lo, mid)
    return lo * mean_out


def predict(row: pd.Series, scales: tuple[float, float] | None = None) -> float:
    """The tool's prediction of the row's published tokens/s."""
    dep, replicas = deployment(row, scales)
    out = mean_output(row)
    offline = offline_tokens_per_s(dep, replicas, out)
    if row["scenario"] == "Offline":
        return offline
    return server_tokens_per_s(dep, replicas, out, LIMITS_MS[str(row["scenario"])], offline)


def error_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Every row predicted: predicted/published and where the row stands (fitted or judged)."""
    out = []
    for _, row in rows.iterrows():
        t = time.process_time()
        pred = predict(row)
        dep, replicas = deployment(row)
        out.append({"row": row["row_id"], "round": row["round"], "role": row["role"], "system": row["system"],
                    "deployment": f"{replicas}× {dep.layout} {dep.gpu.id} {str(dep.precision).upper()} {dep.engine}",
                    "scenario": row["scenario"], "published": float(row["tokens_per_s"]), "predicted": pred,
                    "ratio": pred / float(row["tokens_per_s"]), "cpu_s": time.process_time() - t})
    return pd.DataFrame(out)


def _group(row: pd.Series) -> tuple[str, str, str, str]:
    """(family, engine, precision, release): the row of ``data/engine_efficiency.csv`` a fitted row sets."""
    eng = engine_efficiency(str(row["gpu"]), str(row["engine"]), str(row["precision"]), str(row["round"]))
    return (eng.family if eng else str(row["gpu"]), str(row["engine"]), str(row["precision"]),
            eng.release if eng else str(row["round"]))


def _bisect_scale(rows: pd.DataFrame, which: int, scales: list[float], same: bool = False) -> float:
    """The factor (0 compute, 1 memory; ``same``: both) whose geometric-mean predicted/published is 1."""
    lo, hi = math.log(0.25), math.log(2.5)
    for _ in range(10):
        mid = (lo + hi) / 2.0
        trial = list(scales)
        trial[which] = math.exp(mid)
        if same:
            trial = [math.exp(mid)] * 2
        ratio = np.exp(np.mean([math.log(max(predict(r, (trial[0], trial[1])), 1e-9) / float(r["tokens_per_s"]))
                                for _, r in rows.iterrows()]))
        lo, hi = (mid, hi) if ratio < 1.0 else (lo, mid)
    return math.exp((lo + hi) / 2.0)


def fit(rows: pd.DataFrame) -> dict[tuple[str, str, str, str], tuple[float, float, list[str]]]:
    """Per family × engine × precision × release: (compute, memory) factors fitted on its ``fitted`` rows.

    The compute factor makes the simulated Offline throughput match (an all-at-once load is compute-bound at these
    lengths). Where a fitted Interactive row exists (Hopper: H200), the memory factor makes it match (the decode
    step at moderate batch under a 40 ms TPOT), alternating with the compute factor for two rounds. Otherwise
    TensorRT-LLM keeps the memory factor at 1 (the generic decode step was fitted on TensorRT-LLM's per-batch
    tables) and other engines, without per-batch rows here, scale both by the compute factor.
    """
    fitted = rows[rows["role"] == "fitted"]
    result = {}
    for key, group in fitted.groupby(fitted.apply(_group, axis=1)):
        offline, tight = group[group["scenario"] == "Offline"], group[group["scenario"] == "Interactive"]
        if len(tight):
            scales = [1.0, 1.0]
            for _ in range(2):
                scales[0] = _bisect_scale(offline, 0, scales)
                scales[1] = _bisect_scale(tight, 1, scales)
            compute, memory = scales
        else:
            compute = _bisect_scale(offline, 0, [1.0, 1.0], same=key[1] != "trtllm")
            memory = 1.0 if key[1] == "trtllm" else compute
        result[key] = (compute, memory, list(group["row_id"]))
        print(f"fitted {key}: compute ×{compute:.3f}, memory ×{memory:.3f} on {list(group['row_id'])}", flush=True)
    return result


def write_fit(result: dict[tuple[str, str, str, str], tuple[float, float, list[str]]]) -> None:
    """Write the fitted factors into ``data/engine_efficiency.csv`` (rows kept in their order)."""
    table = pd.read_csv(ENGINE_EFFICIENCY_PATH, dtype=str, keep_default_na=False)
    for i, r in table.iterrows():
        key = (r["family"], r["engine"], r["precision"], r["release"])
        if key in result:
            c, m, ids = result[key]
            table.loc[i, "mfu_scale"] = f"{c:.4f}"
            table.loc[i, "mbu_scale"] = f"{m:.4f}"
            table.loc[i, "fitted_on"] = "; ".join(ids)
    table.to_csv(ENGINE_EFFICIENCY_PATH, index=False, lineterminator="\n")


def markdown(table: pd.DataFrame) -> str:
    """The error table and its summary lines, as benchmarks/README.md shows them."""
    lines = ["| row | role | system | deployment | scenario | published tok/s | predicted | predicted/published |",
             "|---|---|---|---|---|---:|---:|---:|"]
    for r in table.itertuples(index=False):
        lines.append(f"| {r.row} | {r.role} | {r.system} | {r.deployment} | {r.scenario} | {r.published:,.0f} | "
                     f"{r.predicted:,.0f} | {r.ratio:.2f} |")
    lines.append("")
    parts = {"fitted": table["role"] == "fitted", "judged (all)": table["role"] == "judged",
             "judged, v5.0 (the software the fits come from)": (table["role"] == "judged") & (table["round"] == "v5.0"),
             "judged, v4.1 (an older software round)": (table["role"] == "judged") & (table["round"] == "v4.1")}
    for label, mask in parts.items():
        part = table[mask]
        if len(part):
            err = (part["ratio"] - 1.0).abs()
            worst = part.loc[err.idxmax()]
            lines.append(f"- {label}: {len(part)} rows, median |error| {err.median():.1%}, worst {worst['row']} "
                         f"({worst['ratio']:.2f}×), within 35%: {int((err <= 0.35).sum())}/{len(part)}")
    pairs = table.assign(key=table["row"].str.rsplit("-", n=1).str[0]).pivot_table(
        index="key", columns="scenario", values="predicted", aggfunc="first")
    if {"Offline", "Server"} <= set(pairs.columns):
        both = pairs.dropna(subset=["Offline", "Server"])
        below = both[both["Offline"] < both["Server"]]
        lines.append(f"- predicted Offline ≥ predicted Server on {len(both) - len(below)} of {len(both)} systems"
                     + (f"; below on {', '.join(f'{k} ({r.Offline:,.0f} < {r.Server:,.0f})' for k, r in below.iterrows())}"
                        if len(below) else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", nargs="*", default=None, help="row ids to predict (default: all)")
    p.add_argument("--fit", action="store_true", help="refit data/engine_efficiency.csv on the fitted rows first")
    p.add_argument("--write", action="store_true", help="with --fit: write the factors into the data file")
    args = p.parse_args(argv)
    rows = published_rows()
    if args.fit:
        result = fit(rows)
        if args.write:
            write_fit(result)
            engine_efficiency.cache_clear()
            from shapeviz.physics import engines
            engines.engine_rows.cache_clear()
    if args.rows:
        rows = rows[rows["row_id"].isin(args.rows)]
    t = time.time()
    table = error_table(rows)
    print(markdown(table))
    print(f"\n{len(table)} rows in {time.time() - t:.0f} s wall, {table['cpu_s'].sum():.0f} s CPU; load average "
          f"{os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
