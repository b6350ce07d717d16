"""The server side of the demo's first page on a fresh server, with the disk cache cold and warm.

    python benchmarks/bench_cache_first_page.py [--runs 3]

Each run is a fresh Python process (a restarted server) that renders ``app.py``'s first page with Streamlit's
AppTest (no browser) and reports its CPU seconds, wall seconds and whether scikit-learn was imported (it is only
needed when the analysis is computed, not read). Run 1 starts from an empty cache folder (the first start of a
version: it computes and writes the demo's log, analysis and plane); later runs read them. The machine is shared:
CPU seconds are the figure to compare, with the load average printed beside them.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, sys.argv[1])
cpu, wall = time.process_time(), time.perf_counter()
from streamlit.testing.v1 import AppTest
at = AppTest.from_file(sys.argv[1] + "/app.py", default_timeout=600).run()
assert not at.exception, at.exception
print(json.dumps({"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall,
                  "sklearn": "sklearn" in sys.modules}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        env = dict(os.environ, SHAPEVIZ_CACHE_DIR=str(Path(work) / "cache"),
                   SHAPEVIZ_CACHE_KEY_FILE=str(Path(work) / "key" / "cache.key"))
        for run in range(1, args.runs + 1):
            out = subprocess.run([sys.executable, "-c", CHILD, str(ROOT)], env=env, capture_output=True, text=True,
                                 check=True, cwd=ROOT)
            result = json.loads(out.stdout.strip().splitlines()[-1])
            cache = "cold" if run == 1 else "warm"
            size = sum(p.stat().st_size for p in (Path(work) / "cache").glob("*")) / 1e6
            print(f"run {run} ({cache} cache): CPU {result['cpu_s']:.2f} s, wall {result['wall_s']:.2f} s, "
                  f"scikit-learn imported: {result['sklearn']}, cache folder {size:.1f} MB, "
                  f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
