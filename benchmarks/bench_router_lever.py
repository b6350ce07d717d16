"""The router lever beside the answer (issue #27): the fleet routing round-robin (the answer ``plan`` prints) and
the fleet with the router that keeps the log's reuse (``sizing.router_lever``, the line ``plan`` and the page show).

    python benchmarks/bench_router_lever.py

Each row: the answer's replicas and CPU, the lever's router, replicas and CPU (``time.process_time`` of its own
sizing), with the load average beside it. The deployment is ``plan``'s default: the log's model (else
Llama-3.1-70B) on H100 at its checkpoint's precision, the smallest TP that fits; every product judged against the
1 s / 50 ms pair unless a row says otherwise.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shapeviz.fleet.sizing import fleet_answer, pair_classes, router_lever  # noqa: E402
from shapeviz.ingest import load_log  # noqa: E402
from shapeviz.physics.steps import Deployment, smallest_tp  # noqa: E402
from shapeviz.serving.planner import Workload  # noqa: E402
from shapeviz.workload.synth import generate  # noqa: E402

TRACES = Path(os.environ.get("SHAPEVIZ_TRACES", ROOT.parent / "shared" / "data" / "traces"))
CASES = (   # name, log (None: the demo), TTFT class ms
    ("demo (hashes and sessions)", None, 1000.0),
    ("Mooncake conversation (hashes), TTFT 5 s", "mooncake_fast25/conversation_trace.jsonl.gz", 5000.0),
    ("BurstGPT 3 (sessions)", "burstgpt/burstgpt3_slice.csv", 1000.0),
    ("Azure 2023 code (no reuse)", "azure_llm_2023/AzureLLMInferenceTrace_code.csv", 1000.0),
)


def main() -> None:
    print("| log | answer (round-robin) | CPU | lever | CPU | load |")
    print("|---|---|---:|---|---:|---:|")
    for name, path, ttft in CASES:
        frame = generate(20_000, seed=0) if path is None else load_log(TRACES / path).frame
        dep = Deployment("llama-3.1-70b", "h100", "bf16", None, smallest_tp("llama-3.1-70b", "h100", "bf16"))
        workload, classes = Workload.from_frame(frame), pair_classes(frame, ttft, 50.0)
        load = os.getloadavg()[0]
        started = time.process_time()
        sizing = fleet_answer(workload, dep, frame, ttft_slo_ms=ttft, classes=classes)[1]
        answer_s = time.process_time() - started
        started = time.process_time()
        lever = router_lever(sizing, frame, dep.tp, lambda router: fleet_answer(
            workload, dep, frame, ttft_slo_ms=ttft, classes=classes, router=router)[1])
        lever_s = time.process_time() - started
        shown = "none" if lever is None else f"{lever['replicas']} × TP{dep.tp}, {lever['router']}"
        print(f"| {name} | {sizing.replicas} × TP{dep.tp} ({sizing.method}) | {answer_s:.2f} s | {shown} | "
              f"{lever_s:.2f} s | {load:.1f} |")


if __name__ == "__main__":
    main()
