"""Validate the serving simulator on the published online-serving and NIM rows, and time it.

    python benchmarks/bench_simulator.py [--reference ../shared/reference] [--speed] [--analytic]

Prints markdown tables: simulated vs measured mean TTFT, mean ITL and throughput for every row of
``trtllm_online_serving_h100.csv`` (Poisson arrivals at the offered QPS, 500 requests, as measured) and every NIM
concurrency row of ``published_h100_mlperf_nim.csv`` (closed loop of C clients), both TensorRT-LLM engines, so
prompts are scheduled whole (``chunked_prefill=False``, TensorRT-LLM's default), the median and worst errors, the
knee (the first load where mean TTFT doubles the lightest load's), and, with ``--analytic``, the analytic
planner's figures on the same rows. ``--speed`` times a 500-request run and one hour of a 10 req/s log on 8
replicas (CPU seconds, peak memory of the simulation). ``--speed-table`` prints requests per CPU-second at 1, 8
and 32 replicas and 10k / 100k (and, with ``--million``, 1M) requests, the compiled loop against the Python
one, the first call's compile, and the issue's case against ``summary`` of the same log (``--log-out`` writes it).
``--shared-prefix`` prints the prefix-aware, round-robin and least-tokens routers on issue 28's shared-prefix log
(cached share of prompt tokens and TTFT p90 at 3 to 20 req/s on a 141k-token KV pool per replica).
``--memory`` prints the peak RSS of a 100k and a 1M run (8 replicas), each in a fresh process, against the RSS
before it (the loop loaded, the requests built): what the simulation adds per request. ``--random-router`` times
the random router in the compiled loop against the Python loop (and checks they agree).
"""
from __future__ import annotations

import argparse
import math
import os
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shapeviz.physics.steps import Deployment, Efficiency  # noqa: E402
from shapeviz.serving.planner import Workload, load_curve  # noqa: E402
from shapeviz.serving import simulator  # noqa: E402
from shapeviz.serving.simulator import Requests, fixed_requests, simulate  # noqa: E402
from shapeviz.workload.synth import shared_prefix_log  # noqa: E402


def _err(sim: float, measured: float) -> float:
    return sim / measured - 1.0


def online_rows(reference: Path, analytic: bool, eff: Efficiency | None = None) -> pd.DataFrame:
    """Every Triton/TensorRT-LLM online-serving row, simulated (Poisson at the offered rate, 500 requests).

    ``eff``: the efficiencies to simulate with (default: the stored ones, which were fitted on these rows too).
    """
    rows = pd.read_csv(reference / "calibration" / "trtllm_online_serving_h100.csv")
    out = []
    for r in rows.itertuples(index=False):
        model = "llama-3.1-70b" if "70B" in r.model else "llama-3.1-8b"
        dep = Deployment(model, "h100-sxm", "bf16", None, int(r.tp), eff)
        qps = float(r.qps_offered)
        req = fixed_requests(int(r.isl), int(r.osl), 500)
        if math.isinf(qps):  # everything at once: arrivals all at t=0
            req = Requests(req.input_tokens, req.output_tokens, req.cached_tokens, np.zeros(500))
            res = simulate(req, dep, arrivals="trace", chunked_prefill=False)
        else:
            res = simulate(req, dep, rate_rps=qps, chunked_prefill=False)
        s = res.summary()
        row = dict(model=model, tp=int(r.tp), isl=int(r.isl), osl=int(r.osl), qps=qps,
                   served=float(r.throughput_req_s), sim_served=s["throughput"]["requests_per_s"],
                   ttft=float(r.mean_ttft_ms), sim_ttft=s["ttft_ms"]["mean"],
                   itl=float(r.mean_itl_ms), sim_itl=s["itl_ms"]["mean"],
                   saturated=bool(float(r.throughput_req_s) < 0.9 * qps), sim_saturated=s["saturated"])
        if analytic and not math.isinf(qps):
            w = Workload.fixed(int(r.isl), int(r.osl), rate_rps=qps)
            a = load_curve(w, dep, multipliers=[1.0], replicas=1).iloc[0]
            row.update(an_ttft_p50=a["ttft_p50_ms"], an_tpot_p50=a["tpot_p50_ms"])
        out.append(row)
    return pd.DataFrame(out)


def nim_rows(reference: Path, eff: Efficiency | None = None) -> pd.DataFrame:
    """Every NIM fixed-concurrency row (5000 in / 500 out, Llama-3.3-70B FP8 on 2×H100 TP2), closed loop."""
    pub = pd.read_csv(reference / "calibration" / "published_h100_mlperf_nim.csv")
    nim = pub[pub["source_id"].str.startswith("nim")]
    wide = nim.pivot_table(index="concurrency_or_batch", columns="metric", values="value", aggfunc="first")
    dep = Deployment("llama-3.3-70b", "h100-sxm", "fp8", None, 2, eff)
    out = []
    for c, r in wide.iterrows():
        c = int(float(c))
        s = simulate(fixed_requests(5000, 500, max(500, 8 * c)), dep, concurrency=c, chunked_prefill=False).summary()
        out.append(dict(concurrency=c, ttft=r["ttft_ms"], sim_ttft=s["ttft_ms"]["mean"], itl=r["itl_ms"],
                        sim_itl=s["itl_ms"]["mean"], tput=r["throughput"],
                        sim_tput=s["throughput"]["output_tokens_per_s"], preemptions=s["preemptions"]))
    return pd.DataFrame(out)


def knee(loads: np.ndarray, ttft: np.ndarray) -> float:
    """First load whose mean TTFT is at least twice the lightest load's (inf if none)."""
    hit = np.flatnonzero(ttft >= 2.0 * ttft[0])
    return float(loads[hit[0]]) if hit.size else math.inf


def speed() -> None:
    """CPU seconds and peak memory of a 500-request run and of 36k requests on 8 replicas."""
    dep = Deployment("llama-3.1-70b", "h100-sxm", "bf16", None, 4)
    times = []
    for _ in range(5):
        t = time.process_time()
        simulate(fixed_requests(467, 256, 500), dep, rate_rps=16.0)
        times.append(time.process_time() - t)
    print(f"500 requests, 467/256 at 16 req/s on TP4: median {np.median(times):.3f} s CPU "
          f"(range {min(times):.3f}-{max(times):.3f}, 5 runs)")
    rng = np.random.default_rng(1)
    n = 36_000
    inp = np.exp(rng.normal(7.0, 1.0, n)).astype(np.int64).clip(1, 30_000)
    out = np.exp(rng.normal(5.0, 1.0, n)).astype(np.int64).clip(1, 4_000)
    arrival = np.cumsum(rng.exponential(0.1, n))
    dep2 = Deployment("llama-3.1-70b", "h100-sxm", "fp8", None, 2)
    req = Requests(inp, out, np.zeros(n, dtype=np.int64), arrival)
    t = time.process_time()
    res = simulate(req, dep2, replicas=8)
    cpu = time.process_time() - t
    s = res.summary()
    print(f"1 h at 10 req/s (36,000 lognormal requests, mean {inp.mean():.0f} in / {out.mean():.0f} out) on 8 × "
          f"TP2 FP8: {cpu:.2f} s CPU; TTFT p90 {s['ttft_ms']['p90']:.0f} ms, busy {s['utilization']:.0%}; "
          f"process max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    for size in (9_000, 36_000):  # memory: a second, traced run (tracemalloc slows it several-fold)
        tracemalloc.start()
        part = Requests(inp[:size], out[:size], np.zeros(size, dtype=np.int64), arrival[:size])
        simulate(part, dep2, replicas=8)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"peak traced memory of the simulation, {size:,} requests: {peak / 2**20:.1f} MiB")


RATE_PER_REPLICA = 4.0   # req/s per TP2 replica: the 28 req/s on 7 replicas


def lognormal_requests(n: int, rate_rps: float, seed: int = 1) -> Requests:
    """``n`` requests, lognormal input (median 1,000) and output (median 200), Poisson arrivals at ``rate_rps``."""
    rng = np.random.default_rng(seed)
    inp = np.exp(rng.normal(np.log(1000.0), 1.0, n)).astype(np.int64).clip(1, 30_000)
    out = np.exp(rng.normal(np.log(200.0), 1.0, n)).astype(np.int64).clip(1, 4_000)
    arrival = np.cumsum(rng.exponential(1.0 / rate_rps, n))
    return Requests(inp, out, np.zeros(n, dtype=np.int64), arrival - arrival[0])


def _cpu_of(req: Requests, replicas: int, compiled: bool) -> tuple[float, dict]:
    simulator.COMPILED = compiled
    try:
        t = time.process_time()
        s = simulate(req, Deployment("llama-3.1-70b", "h100-sxm", "fp8", None, 2), replicas=replicas).summary()
        return time.process_time() - t, s
    finally:
        simulator.COMPILED = True


def _load() -> str:
    return "load " + " / ".join(f"{x:.1f}" for x in os.getloadavg())


def speed_table(million: bool, python_loop: bool, log_out: Path | None) -> None:
    """Requests per CPU-second of the compiled loop (and the Python loop) by fleet size and log length."""
    t = time.process_time()
    _cpu_of(lognormal_requests(200, RATE_PER_REPLICA), 1, True)
    print(f"first call in this process (numba import + load or compile of the loop): "
          f"{time.process_time() - t:.2f} s CPU ({_load()})\n")
    print("| replicas | requests | rate req/s | compiled: CPU s | req per CPU-s | Python loop: CPU s | req per CPU-s "
          "| speed-up | TTFT p90 ms | TPOT p90 ms | load (1/5/15 min) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    cases = [(k, n) for n in (10_000, 100_000) for k in (1, 8, 32)] + [(7, 100_000)]
    if million:
        cases.append((8, 1_000_000))
    for k, n in cases:
        req = lognormal_requests(n, RATE_PER_REPLICA * k)
        fast, s = _cpu_of(req, k, True)
        slow = _cpu_of(req, k, False)[0] if python_loop and n <= 100_000 else math.nan
        cells = (f"{slow:.1f} | {n / slow:,.0f} | ×{slow / fast:.0f}" if slow == slow else "– | – | –")
        print(f"| {k} | {n:,} | {RATE_PER_REPLICA * k:g} | {fast:.2f} | {n / fast:,.0f} | {cells} | "
              f"{s['ttft_ms']['p90']:,.0f} | {s['tpot_ms']['p90']:.1f} | {_load()} |", flush=True)
    print(f"\nprocess max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    if log_out is not None:   # the case as a log file, for `summary` and `simulate` as whole commands
        req = lognormal_requests(100_000, 28.0)
        start = pd.Timestamp("2026-01-01")
        pd.DataFrame({"timestamp": start + pd.to_timedelta(req.arrival_s, unit="s"),
                      "input_tokens": req.input_tokens, "output_tokens": req.output_tokens}).to_csv(log_out, index=False)
        for command in (["summary", str(log_out)],
                        ["simulate", str(log_out), "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--precision", "fp8",
                         "--tp", "2", "--replicas", "7"]):
            before = os.times()
            subprocess.run([sys.executable, "-m", "shapeviz", *command], cwd=ROOT, check=True,
                           stdout=subprocess.DEVNULL)
            after = os.times()
            cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
            print(f"`python -m shapeviz {command[0]}` on the issue's log (100k requests, 28 req/s), whole command: "
                  f"{cpu:.2f} s CPU ({_load()})")


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def memory_run(n: int, replicas: int = 8) -> None:
    """One run of ``n`` requests in this (fresh) process: RSS before, peak RSS after, the growth per request."""
    dep = Deployment("llama-3.1-70b", "h100-sxm", "fp8", None, 2)
    simulate(lognormal_requests(200, RATE_PER_REPLICA), dep, replicas=1)   # the loop loaded, numba imported
    req = lognormal_requests(n, RATE_PER_REPLICA * replicas)
    before = _rss_mib()
    t = time.process_time()
    summary = simulate(req, dep, replicas=replicas).summary()   # the result and its summary, as `simulate` makes them
    cpu = time.process_time() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"| {n:,} | {replicas} | {before:,.0f} | {peak:,.0f} | {(peak - before) * 2**20 / n:,.0f} | {cpu:.2f} "
          f"| {summary['ttft_ms']['p90']:,.0f} | {_load()} |", flush=True)


def memory_table() -> None:
    """Peak memory of a 100k and a 1M run, each in its own process (``memory_run``)."""
    print("| requests | replicas | RSS before MiB | peak RSS MiB | growth B/request | CPU s | TTFT p90 ms | load |")
    print("|---|---|---|---|---|---|---|---|")
    for n in (100_000, 1_000_000):
        subprocess.run([sys.executable, __file__, "--memory-run", str(n)], cwd=ROOT, check=True)


def random_router_rows() -> None:
    """The random router: the compiled loop (Python's own draws) against the Python loop, 8 replicas."""
    print("| router | requests | compiled: CPU s | req per CPU-s | Python loop: CPU s | req per CPU-s | same result "
          "| load |")
    print("|---|---|---|---|---|---|---|---|")
    dep = Deployment("llama-3.1-70b", "h100-sxm", "fp8", None, 2)
    simulate(lognormal_requests(200, RATE_PER_REPLICA), dep, replicas=1, router="random")
    for n in (10_000, 100_000):
        req = lognormal_requests(n, RATE_PER_REPLICA * 8)
        t = time.process_time()
        fast = simulate(req, dep, replicas=8, router="random", seed=1)
        cpu_fast = time.process_time() - t
        cells, same = "– | –", "–"
        if n <= 10_000:
            simulator.COMPILED = False
            try:
                t = time.process_time()
                slow = simulate(req, dep, replicas=8, router="random", seed=1)
                cpu_slow = time.process_time() - t
            finally:
                simulator.COMPILED = True
            cells = f"{cpu_slow:.2f} | {n / cpu_slow:,.0f}"
            same = "yes" if fast.requests.equals(slow.requests) else "NO"
        print(f"| random | {n:,} | {cpu_fast:.2f} | {n / cpu_fast:,.0f} | {cells} | {same} | {_load()} |", flush=True)


def shared_prefix_table(n: int = 2000, kv_tokens: int = 141_000) -> None:
    """Router × rate on the shared-prefix log, 4 × TP4 70B with ``kv_tokens`` of KV per replica."""
    dep = Deployment("llama-3.1-70b", "h100-sxm", "bf16", None, 4)
    fraction = kv_tokens / (dep.kv_pool_bytes_per_gpu(1.0) / float(dep.kv_bytes_per_gpu(1.0)))
    routers = ("prefix", "round_robin", "least_tokens")
    print("| rate req/s | " + " | ".join(f"{r}: cached share | TTFT p90 ms | preemptions" for r in routers) + " |")
    print("|---|" + "---|---|---|" * len(routers))
    for rate in (3.0, 6.0, 12.0, 18.0, 20.0):
        frame = shared_prefix_log(rate, n)
        cells = []
        for router in routers:
            r = simulate(frame, dep, replicas=4, router=router, block_size=64, kv_fraction=fraction)
            cells.append(f"{r.prefix['hit_ratio_tokens']:.3f} | {r.summary()['ttft_ms']['p90']:,.0f} | {r.preemptions}")
        print(f"| {rate:g} | " + " | ".join(cells) + " |", flush=True)

TRACES = {
    "azure code": "azure_llm_2023/AzureLLMInferenceTrace_code.csv",
    "azure conv": "azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
    "burstgpt": "burstgpt/burstgpt_slice.csv",
    "mooncake conv": "mooncake_fast25/conversation_trace.jsonl.gz",
    "arxiv summ.": "vidur_arxiv_summarization/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
}


def traces_vs_analytic(traces: Path) -> None:
    """Analytic p90 vs simulated p90 on the plan's fleet, at ×0.5, ×1 and ×2 of each trace's peak rate."""
    from shapeviz.fleet.sweep import sample_requests, simulated_point
    from shapeviz.ingest import load_log
    from shapeviz.physics import default_deployment
    from shapeviz.serving import plan
    from shapeviz.serving.planner import WhatIf
    from shapeviz.workload.synth import generate

    dep = default_deployment()
    print("| log | GPUs (plan) | traffic | TTFT p90 analytic | simulated | gap | TPOT p90 analytic | simulated | gap |")
    print("|---|---|---|---|---|---|---|---|---|")
    sources = {"demo (20k, seed 0)": None, **TRACES}
    for name, rel in sources.items():
        frame = generate(20_000, seed=0) if rel is None else load_log(traces / rel).frame
        w = Workload.from_frame(frame)
        p = plan(w, dep)
        k = p.replicas or 1
        curve = load_curve(w, dep, multipliers=(0.5, 1.0, 2.0), replicas=k)
        req = sample_requests(frame, WhatIf(), 1500)
        for row in curve.itertuples(index=False):
            s = simulated_point(req, dep, w.rate_rps * row.traffic_multiplier, k, 1000, 50).summary()
            cells = []
            for an, sim in ((row.ttft_p90_ms, s["ttft_ms"]["p90"]), (row.tpot_p90_ms, s["tpot_ms"]["p90"])):
                gap = "" if not (an == an and sim) else f"{sim / an - 1:+.0%}"
                cells += ["sat." if an != an else f"{an:,.0f}", f"{sim:,.0f}" + (" (grows)" if s["saturated"] else ""), gap]
            print(f"| {name} | {k * dep.tp} | ×{row.traffic_multiplier:g} | " + " | ".join(cells) + " |")


def demo_levers() -> None:
    """The scheduling levers on the demo, sized by simulation."""
    from shapeviz.fleet.levers import lever_citations, simulate_levers
    from shapeviz.fleet.sweep import sample_requests
    from shapeviz.physics import default_deployment
    from shapeviz.serving.planner import WhatIf
    from shapeviz.workload.synth import generate

    frame, dep = generate(20_000, seed=0), default_deployment()
    w = Workload.from_frame(frame)
    for mult in (1.0, 10.0):
        t = time.process_time()
        table = simulate_levers(sample_requests(frame, WhatIf(), 1500), dep, w.rate_rps * mult, 1000, 50)
        print(f"\ndemo at ×{mult:g} its peak rate ({w.rate_rps * mult:.2f} req/s), {time.process_time() - t:.1f} s CPU:")
        for r in table.itertuples(index=False):
            print(f"- {r.label}: {r.gpus if r.gpus == r.gpus and r.gpus is not None else 'cannot meet'} GPUs, "
                  f"TTFT p90 {r.ttft_p90_ms:,.0f} ms, TPOT p90 {r.tpot_p90_ms:,.1f} ms ({r.detail})")
        for lever, cite in lever_citations(table).items():
            print(f"  - {lever}: {cite}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reference", default=str(ROOT.parent / "shared" / "reference"))
    parser.add_argument("--speed", action="store_true")
    parser.add_argument("--analytic", action="store_true")
    parser.add_argument("--traces", default=None, help="traces folder: analytic vs simulated on each (slow)")
    parser.add_argument("--levers", action="store_true", help="the scheduling levers on the demo")
    parser.add_argument("--no-validation", action="store_true")
    parser.add_argument("--speed-table", action="store_true", help="requests per CPU-second by replicas and requests")
    parser.add_argument("--million", action="store_true", help="with --speed-table: 1M requests on 8 replicas too")
    parser.add_argument("--python-loop", action="store_true", help="with --speed-table: the Python loop as well")
    parser.add_argument("--log-out", default=None, help="with --speed-table: write the issue's log here (CSV) and "
                        "time `summary` and `simulate` on it")
    parser.add_argument("--shared-prefix", action="store_true", help="issue 28's shared-prefix table (routers × rate)")
    parser.add_argument("--memory", action="store_true", help="peak RSS of a 100k and a 1M run, each in its own process")
    parser.add_argument("--memory-run", type=int, default=None, metavar="N", help=argparse.SUPPRESS)
    parser.add_argument("--random-router", action="store_true", help="the random router, compiled vs Python loop")
    args = parser.parse_args()
    if args.memory_run:
        memory_run(args.memory_run)
        return
    ref = Path(args.reference)
    if args.memory:
        print("## Simulator memory\n")
        memory_table()
    if args.random_router:
        print("## The random router\n")
        random_router_rows()
    if args.shared_prefix:
        print("## Shared prefixes on a 141k-token KV pool\n")
        shared_prefix_table()
    if args.speed_table:
        print("## Simulator speed\n")
        speed_table(args.million, args.python_loop, Path(args.log_out) if args.log_out else None)
    if args.traces:
        print("## Analytic vs simulated on the real traces\n")
        traces_vs_analytic(Path(args.traces))
    if args.levers:
        print("\n## Scheduling levers on the demo\n")
        demo_levers()
    if args.no_validation:
        return

    on = online_rows(ref, args.analytic)
    print("## Triton / TensorRT-LLM online serving (Poisson at the offered QPS, 500 requests)\n")
    cols = "| model | TP | ISL/OSL | QPS | served meas/sim | TTFT meas | TTFT sim | err | ITL meas | ITL sim | err |"
    if args.analytic:
        cols += " analytic TTFT p50 / TPOT p50 |"
    print(cols)
    print("|" + "---|" * (cols.count("|") - 1))
    for r in on.itertuples(index=False):
        line = (f"| {r.model} | {r.tp} | {r.isl}/{r.osl} | {r.qps:g}{' (sat.)' if r.saturated else ''} | "
                f"{r.served:g} / {r.sim_served:.1f} | {r.ttft:,.0f} | {r.sim_ttft:,.0f} | {_err(r.sim_ttft, r.ttft):+.0%} | "
                f"{r.itl:g} | {r.sim_itl:.1f} | {_err(r.sim_itl, r.itl):+.0%} |")
        if args.analytic:
            a_t = getattr(r, "an_ttft_p50", float("nan"))
            a_p = getattr(r, "an_tpot_p50", float("nan"))
            line += " saturated |" if not (a_t == a_t) else f" {a_t:,.0f} / {a_p:,.0f} |"
        print(line)
    below = on[~on["saturated"]]
    e_t = (below["sim_ttft"] / below["ttft"] - 1).abs()
    e_i = (below["sim_itl"] / below["itl"] - 1).abs()
    print(f"\nbelow saturation ({len(below)} rows): TTFT median |err| {e_t.median():.0%}, worst {e_t.max():.0%}; "
          f"ITL median |err| {e_i.median():.0%}, worst {e_i.max():.0%}")
    sat = on[on["qps"] == math.inf]
    e_s = (sat["sim_served"] / sat["served"] - 1)
    print("saturation throughput (QPS inf rows), served req/s sim vs measured: "
          + ", ".join(f"{r.model} {r.isl}/{r.osl}: {r.sim_served:.1f} vs {r.served:g} ({e:+.0%})"
                      for r, e in zip(sat.itertuples(index=False), e_s)))
    print("\nknee (first offered QPS where mean TTFT ≥ 2× the 2-QPS value), measured vs simulated:")
    for key, g in on[on["qps"] < math.inf].groupby(["model", "isl", "osl"], sort=False):
        g = g.sort_values("qps")
        print(f"- {key[0]} {key[1]}/{key[2]}: measured {knee(g.qps.to_numpy(), g.ttft.to_numpy()):g}, "
              f"simulated {knee(g.qps.to_numpy(), g.sim_ttft.to_numpy()):g}"
              + (f", analytic (p50) {knee(g.qps.to_numpy(), np.nan_to_num(g.an_ttft_p50.to_numpy(), nan=np.inf)):g}"
                 if args.analytic else ""))

    nim = nim_rows(ref)
    print("\n## NIM 1.8.0, Llama-3.3-70B FP8, 2×H100 TP2, 5000/500, closed loop of C clients\n")
    print("| C | TTFT meas | TTFT sim | err | ITL meas | ITL sim | err | tok/s meas | tok/s sim | err | preemptions |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in nim.itertuples(index=False):
        print(f"| {r.concurrency} | {r.ttft:,.0f} | {r.sim_ttft:,.0f} | {_err(r.sim_ttft, r.ttft):+.0%} | {r.itl:.1f} | "
              f"{r.sim_itl:.1f} | {_err(r.sim_itl, r.itl):+.0%} | {r.tput:,.0f} | {r.sim_tput:,.0f} | "
              f"{_err(r.sim_tput, r.tput):+.0%} | {r.preemptions} |")
    e_t = (nim["sim_ttft"] / nim["ttft"] - 1).abs()
    e_i = (nim["sim_itl"] / nim["itl"] - 1).abs()
    e_p = (nim["sim_tput"] / nim["tput"] - 1).abs()
    print(f"\nNIM: TTFT median |err| {e_t.median():.0%} (worst {e_t.max():.0%}), ITL {e_i.median():.0%} "
          f"(worst {e_i.max():.0%}), throughput {e_p.median():.0%} (worst {e_p.max():.0%})")
    if args.speed:
        print("\n## Speed\n")
        speed()


if __name__ == "__main__":
    main()
