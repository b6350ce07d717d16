"""Mutations made by a tool: mutmut over the modules where correctness is the answer, a seeded sample per module.

    python scripts/mutmut_sample.py                      # every module below, 12 mutants of each (seed 39)
    python scripts/mutmut_sample.py --module shapeviz/plain.py --sample 0    # every mutant of one module
    python scripts/mutmut_sample.py --seed 7 --sample 30                     # another, larger sample

The hand-written mutants (``tests/mutants/*.toml``, ``scripts/mutants.py``) find what their authors thought of;
mutmut's operators (every comparison, constant, boolean and argument it can change) find the rest. Each module is
mutated in its own scratch copy of the checkout (the files git tracks plus untracked, unignored ones, as
``scripts/mutants.py`` copies them), with ``mutmut run`` restricted to that module and to the tests that cover it
(``COVERING``: fast tests only; the tests on the real traces are the suite's, not this sampler's). mutmut lists the
module's mutants, ``--sample`` of them are drawn with ``--seed`` (0: all), run, and the kill rate per module is
printed: killed / (killed + survived), a timeout counted as killed, mutants no test reaches counted as survivors.
A full run over these modules takes hours on two cores; the figures in tests/README.md say which sample they are.
"""
from __future__ import annotations

import argparse
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutants import ROOT, _copy, _env, tree_files  # noqa: E402 - the same copy of the checkout as the mutation check

# module -> the tests that cover it (fast ones: a mutant runs those of its function that mutmut saw covering it)
# (unit/test_tool_survivors*.py hold the tests written for the tool's earlier survivors: they are in each selection;
# unit/test_sizing_stand_in.py is a real sizing search on a stand-in replay, in milliseconds)
SURVIVORS = ["tests/unit/test_tool_survivors.py", "tests/unit/test_tool_survivors_3907.py"]
COVERING: dict[str, list[str]] = {
    "shapeviz/fleet/sizing.py": ["tests/unit/test_answer_branches.py", "tests/unit/test_sizing_stand_in.py",
                                 *SURVIVORS],
    "shapeviz/fleet/autoscale.py": ["tests/unit/test_answer_branches.py", "tests/unit/test_autoscale_engine.py",
                                    *SURVIVORS],
    "shapeviz/serving/products.py": ["tests/unit/test_plan_products.py", "tests/unit/test_sizing_stand_in.py",
                                     *SURVIVORS],
    "shapeviz/plain.py": ["tests/security/test_cache_binding.py", "tests/app/test_disk_cache.py",
                          "tests/security/test_hostile_disk_cache.py", *SURVIVORS],
    "shapeviz/ingest/limits.py": ["tests/unit/test_limits_edges.py", "tests/unit/test_ingest_corpus.py",
                                  "tests/unit/test_caps_at_edge.py"],
    "components/disk_cache.py": ["tests/security/test_cache_binding.py", "tests/app/test_disk_cache.py",
                                 "tests/security/test_hostile_disk_cache.py", *SURVIVORS],
    # the loops' shared helpers (the routers and prefix caches both loops read) and the growth path
    "shapeviz/serving/routers.py": ["tests/unit/test_router_random.py", "tests/unit/test_sim_core_prefix.py",
                                    "tests/unit/test_loops_agree.py"],
    "shapeviz/serving/prefix_cache.py": ["tests/unit/test_prefix.py", "tests/unit/test_sim_core_prefix.py",
                                         "tests/unit/test_loops_agree.py"],
    "shapeviz/fleet/growth.py": ["tests/unit/test_growth.py", "tests/unit/test_answer_branches.py", *SURVIVORS],
}
RESULT = re.compile(r"^\s*(\S+__mutmut_\d+): (.+)$")


def _config(module: str, tests: list[str]) -> str:
    lines = ["[mutmut]", "source_paths=", "    shapeviz", "    components", f"only_mutate={module}",
             "also_copy=", "    pytest.ini", "    data/", "    pages/", "    app.py",
             "pytest_add_cli_args=-p no:randomly -p no:xdist -p no:cacheprovider -q",
             "pytest_add_cli_args_test_selection="] + [f"    {t}" for t in tests]
    return "\n".join(lines) + "\n"


def _results(mutmut: list[str], cwd: Path) -> dict[str, str]:
    out = subprocess.run([*mutmut, "results", "--all", "true"], cwd=cwd, env=_env(ROOT), capture_output=True,
                         text=True).stdout
    return {m.group(1): m.group(2).strip() for m in map(RESULT.match, out.splitlines()) if m}


def sample_module(module: str, sample: int, seed: int, mutmut: list[str]) -> dict[str, object]:
    """Run a seeded sample of ``module``'s mutmut mutants against its covering tests; what happened to each."""
    with tempfile.TemporaryDirectory(prefix="mutmut-") as tmp:
        copy = Path(tmp)
        _copy(ROOT, tree_files(ROOT), copy)
        (copy / "setup.cfg").write_text(_config(module, COVERING[module]))
        started = time.perf_counter()
        # a name no mutant has: mutmut generates the module's mutants and maps tests to functions, and runs none
        subprocess.run([*mutmut, "run", "no.such.mutant"], cwd=copy, env=_env(ROOT), capture_output=True)
        names = sorted(_results(mutmut, copy))
        chosen = names if sample <= 0 or sample >= len(names) else sorted(random.Random(seed).sample(names, sample))
        if chosen:
            subprocess.run([*mutmut, "run", "--max-children", "1", *chosen], cwd=copy, env=_env(ROOT),
                           capture_output=True)
        status = _results(mutmut, copy)
        # each survivor's diff, to explain it or write the test that kills it
        diffs = {name: subprocess.run([*mutmut, "show", name], cwd=copy, env=_env(ROOT), capture_output=True,
                                      text=True).stdout
                 for name in chosen if status.get(name) not in ("killed", "timeout")}
        shutil.rmtree(copy / "mutants", ignore_errors=True)
    outcome = {name: status.get(name, "not checked") for name in chosen}
    killed = sum(s in ("killed", "timeout") for s in outcome.values())
    survived = sum(s in ("survived", "no tests") for s in outcome.values())
    return {"module": module, "mutants": len(names), "sampled": len(chosen), "killed": killed,
            "survived": survived, "rate": killed / max(killed + survived, 1), "outcome": outcome, "diffs": diffs,
            "seconds": time.perf_counter() - started}


def main(argv: list[str] | None = None) -> int:
    """Sample every module (or those given) and print the kill rate of each and the survivors' names."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", action="append", choices=sorted(COVERING), help="a module (repeatable)")
    parser.add_argument("--sample", type=int, default=12, help="mutants drawn per module (0: every one)")
    parser.add_argument("--seed", type=int, default=39)
    args = parser.parse_args(argv)
    mutmut = [sys.executable, "-m", "mutmut"]
    print(f"{'module':<32} {'mutants':>7} {'sampled':>7} {'killed':>6} {'survived':>8} {'rate':>6} {'seconds':>7}")
    for module in args.module or list(COVERING):
        r = sample_module(module, args.sample, args.seed, mutmut)
        print(f"{module:<32} {r['mutants']:>7} {r['sampled']:>7} {r['killed']:>6} {r['survived']:>8} "
              f"{r['rate']:>6.0%} {r['seconds']:>7.0f}", flush=True)
        for name, status in r["outcome"].items():   # type: ignore[union-attr]
            if status not in ("killed", "timeout"):
                print(f"    {status}: {name}", flush=True)
                diff = r["diffs"].get(name, "")   # type: ignore[union-attr]
                print("\n".join(f"        {line}" for line in diff.splitlines()
                                 if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
