"""Independent simulations side by side: a design and a fleet's pools give the same answer serially, in two local
processes and on Dask (an in-process cluster, so the test stays a few seconds), and the command line sends them
where its flags say."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.needs import require_module
from tests.unit.logs import squeezed_brief

require_module("distributed", "the Dask path runs on a distributed LocalCluster")

from distributed import LocalCluster  # noqa: E402

from shapeviz.cli import main  # noqa: E402
from shapeviz.fleet.design import peak_window  # noqa: E402
from shapeviz.fleet.pools import Fleet, Pool, Side, fleet_requests, simulate_fleet  # noqa: E402
from shapeviz.serving.parallel import Runner  # noqa: E402
from shapeviz.serving.products import resolve_classes  # noqa: E402
from shapeviz.workload import synth  # noqa: E402

@pytest.fixture(scope="module")
def brief() -> pd.DataFrame:
    return squeezed_brief(600)


@pytest.fixture(scope="module")
def cluster():
    """A Dask cluster inside this process (threads): the address path of ``Runner``, without starting processes."""
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as c:
        yield c


def test_a_fleets_pools_give_the_same_replay_serially_in_processes_and_on_dask(brief, cluster):
    classes = resolve_classes(brief, {"rag-search": (3000.0, 60.0)})
    # a colocated pool for the RAG search, a prefill/decode pool (two replays in a row) for the rest
    fleet = Fleet((Pool("rag", ("rag-search",), "b200", 2, 2),
                   Pool("split", ("*",), prefill=Side("b200", 1, 4), decode=Side("h100-sxm", 2, 2))),
                  "llama-3.1-70b")
    window = peak_window(fleet_requests(brief), 300)
    here = simulate_fleet(window, fleet, classes)
    assert len(here.pools) == 2 and len(here.requests) == 300
    with Runner(2) as processes, Runner(engine="dask", address=cluster.scheduler_address) as dask:
        for runner in (processes, dask):
            apart = simulate_fleet(window, fleet, classes, runner=runner)
            pd.testing.assert_frame_equal(apart.requests, here.requests, check_exact=True)
            assert apart.products == here.products
            assert [(p.pool.name, p.saturated, p.busy) for p in apart.pools] == [
                (p.pool.name, p.saturated, p.busy) for p in here.pools]


def test_design_on_a_dask_scheduler_runs_its_searches_there(tmp_path: Path, brief, cluster, capsys):
    path = synth.write_log(brief, tmp_path / "brief.csv")
    args = ["design", str(path), "--gpus", "h100,b200", "--search-requests", "150", "--top", "2",
            "--slo", "rag-search=3000:60", "--json"]
    assert main(args) == 0
    serial = json.loads(capsys.readouterr().out)
    assert main(args + ["--dask-scheduler", cluster.scheduler_address]) == 0
    on_dask = json.loads(capsys.readouterr().out)
    for doc in (serial, on_dask):
        doc["search"].pop("cpu_s")
    assert on_dask == serial
    ran = set(cluster.scheduler.task_prefixes)   # the functions the cluster ran, by name
    assert {"search_job", "settle_job"} <= ran   # (dask drops the leading underscore)
    # simulate --fleet replays the designed fleet's pools there too; --scheduler keeps meaning the batch policy
    fleet_file = tmp_path / "fleet.json"
    fleet_file.write_text(json.dumps(serial["designs"][0]["fleet"]))
    sim = ["simulate", str(path), "--fleet", str(fleet_file), "--slo", "rag-search=3000:60", "--json"]
    assert main(sim) == 0
    alone = json.loads(capsys.readouterr().out)
    assert main(sim + ["--engine", "dask", "--dask-scheduler", cluster.scheduler_address]) == 0
    assert json.loads(capsys.readouterr().out) == alone
    assert "simulate_pool" in cluster.scheduler.task_prefixes
    assert main(["simulate", str(path), "--replicas", "2", "--workers", "2"]) == 2
    assert "--fleet" in capsys.readouterr().err
