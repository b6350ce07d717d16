"""Calibration: the stored efficiencies reproduce the published measurements within what the benchmark reports."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from shapeviz.physics.steps import EFFICIENCY_PATH, load_efficiency
from shapeviz.serving import calibration as cal


@pytest.fixture
def evaluated(reference) -> pd.DataFrame:
    return cal.evaluate(cal.reference_rows(reference))


def test_every_published_row_is_used_or_skipped_with_a_reason(reference) -> None:
    rows = cal.reference_rows(reference)
    table = pd.read_csv(reference / "calibration" / "trtllm_max_throughput_h100_a100.csv")
    assert (rows["kind"] == "max_throughput").sum() == len(table)
    usable = rows[rows["skip"] == ""]
    assert set(usable["gpu"]) == {"h100-sxm", "a100-80gb", "a100-pcie"}
    assert (usable["kind"] == "max_throughput").sum() > 600
    assert usable["model"].notna().all()
    assert rows.loc[rows["skip"] != "", "skip"].str.len().gt(10).all()


def test_median_error_is_under_25_percent_overall_and_per_gpu(evaluated: pd.DataFrame) -> None:
    ok = evaluated[evaluated["skip"] == ""]
    assert ok["predicted"].notna().all()
    assert ok["error"].abs().median() < 0.25
    for gpu, errors in ok.groupby("gpu")["error"]:
        assert errors.abs().median() < 0.25, gpu
    # and the model is not systematically optimistic or pessimistic
    assert abs(ok["error"].median()) < 0.1


def test_each_kind_of_measurement_is_reproduced(evaluated: pd.DataFrame) -> None:
    ok = evaluated[evaluated["skip"] == ""]
    medians = ok.groupby("kind")["error"].apply(lambda e: e.abs().median())
    assert set(medians.index) >= {"max_throughput", "ttft_bs1", "static_throughput", "online_ttft", "online_itl"}
    assert (medians < 0.3).all(), medians.to_dict()


def test_stored_errors_match_a_fresh_evaluation(evaluated: pd.DataFrame) -> None:
    """What efficiency.json (and the README) claim is what the stored parameters give today."""
    with open(EFFICIENCY_PATH, encoding="utf-8") as fh:
        document = json.load(fh)
    ok = evaluated[evaluated["skip"] == ""]
    assert document["errors"]["median_abs_error_all"] == pytest.approx(ok["error"].abs().median(), abs=0.01)
    assert document["fitted_on"] and "bench_calibration.py" in document["how_to_refit"]
    assert document["data"]["rows_used"] == len(ok)


def test_held_out_error_is_recomputed_from_the_published_rows(reference) -> None:
    """Fit on H100 rows only, from a start that knows no GPU's rows, and judge on the A100s it never saw.

    The figure is recomputed here, not read back: it must equal what efficiency.json and the benchmarks README
    claim, and stay near it.
    """
    rows = cal.reference_rows(reference)
    h100 = rows["gpu"].str.startswith("h100", na=False)
    median, judged = cal.holdout(rows, sorted(rows.loc[h100, "gpu"].unique()),
                                 sorted(rows.loc[~h100 & (rows["skip"] == ""), "gpu"].unique()))
    assert set(judged.loc[judged["skip"] == "", "gpu"]) == {"a100-80gb", "a100-pcie"}
    with open(EFFICIENCY_PATH, encoding="utf-8") as fh:
        stored = json.load(fh)["errors"]["holdout_median_abs_error"]["fit_h100_check_a100"]
    assert median == pytest.approx(stored, abs=0.01)
    assert median < 0.20


def test_fitted_efficiencies_are_physical() -> None:
    e = load_efficiency()
    assert 0.3 < e.mfu <= 1.0 and 0.3 < e.mbu <= 1.0
    assert 0 < e.step_overhead_ms < 20 and 0 < e.memory_reserve_gib < 12
    for name, source in e.sources.items():
        assert source, name


def test_layout_rows_are_used_and_the_judged_rows_are_outside_the_fit(reference) -> None:
    rows = cal.reference_rows(reference)
    dep = rows[rows["attention_dp"]]
    assert len(dep) == 8 and (dep["skip"] == "").all()            # DEP4 gpt-oss, DEP8 Qwen3 on H100
    assert set(zip(dep["tp"], dep["ep"])) == {(4, 4), (8, 8)}
    assert (rows.loc[rows["model"] == "gpt-oss-20b", "precision"] == "mxfp4").all()
    judged = cal.heldout_rows()
    assert (judged["skip"] == "").all() and judged["model"].notna().all()
    assert set(judged["gpu"]).isdisjoint(set(rows.loc[rows["skip"] == "", "gpu"]))
    assert {"nvfp4", "mxfp4"} <= set(judged["precision"]) and judged["attention_dp"].any()
    # the table is per GPU; a row is one replica: DeepSeek-R1 B200 DEP4 1000/1000 is 6,463 tok/s per GPU
    r1 = judged[(judged["model"] == "deepseek-r1") & (judged["gpu"] == "b200") & (judged["isl"] == 1000)]
    assert float(r1["measured"].iloc[0]) == 4 * 6463


def test_stored_judgement_of_unseen_gpus_and_precisions_matches_a_fresh_one() -> None:
    """What efficiency.json and the README claim on the held-out rows is what the stored parameters give."""
    with open(EFFICIENCY_PATH, encoding="utf-8") as fh:
        claimed = json.load(fh)["errors"]["judged_on_unseen_gpus"]
    fresh = cal.judged_summary(cal.evaluate(cal.heldout_rows()))
    assert fresh == pytest.approx(claimed, abs=1e-3)
    assert fresh["moe_or_fp4_within_2x"] >= 0.8
    assert fresh["dense_fp8_median_abs_error"] < 0.1


def test_each_online_row_is_predicted_as_it_would_be_alone(reference) -> None:
    """The online tables give each prompt shape's TTFT and ITL at several rates; the fit evaluates those rows
    together (one evaluator per shape), and each row's figure must be the one it gets predicted on its own: its own
    shape, its own rate, its own deployment, and the efficiencies the fit is trying (not the last ones tried)."""
    rows = cal.reference_rows(reference)
    online = rows[rows["kind"].isin(["online_ttft", "online_itl"]) & (rows["skip"] == "")]
    assert len(online) > online[["gpu", "model", "isl", "osl"]].drop_duplicates().shape[0]   # shapes shared by rows
    assert online.groupby(["gpu", "model", "isl", "osl"])["rate_rps"].nunique().max() > 1   # ...at several rates
    figures = []
    for eff in (load_efficiency(), cal.neutral_start()):
        together = pd.Series(cal.predict(rows, eff), index=rows.index)[online.index]
        alone = pd.Series([cal.predict(rows.loc[[i]], eff)[0] for i in online.index], index=online.index)
        assert (together == alone).all(), pd.DataFrame({"together": together, "alone": alone})
        figures.append(together)
    assert (figures[0] != figures[1]).all()   # every online figure follows the efficiencies
