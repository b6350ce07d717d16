"""The seeded generator: frames a user would take for real logs, whose numbers follow the data file's sources."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from shapeviz import schema
from shapeviz.analyses.clusters import find_clusters
from shapeviz.analyses.shapes import classify, corner_of
from shapeviz.workload.synth import (
    PROFILES_PATH,
    SCENARIOS,
    generate,
    load_profiles,
    scenario,
    write_log,
)

PROFILES = load_profiles()
BLOCK = PROFILES["block_size_tokens"]["value"]
START = pd.Timestamp(PROFILES["start_utc"]["value"])


@pytest.fixture(scope="module")
def demo() -> pd.DataFrame:
    """A demo mix large enough that the agent product has a few hundred sessions."""
    return generate(150_000, seed=11)


def _p50(frame: pd.DataFrame, product: str) -> tuple[float, float]:
    rows = frame[frame["product"] == product]
    return float(rows["input_tokens"].median()), float(rows["output_tokens"].median())


def _same_frames(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    plain = [c for c in a.columns if c != "hash_ids"]
    if list(a.columns) != list(b.columns) or not a[plain].equals(b[plain]):
        return False
    if "hash_ids" in a:
        return all(np.array_equal(x, y) for x, y in zip(a["hash_ids"], b["hash_ids"]))
    return True


# --- determinism and the contract -------------------------------------------------------------------------

def test_same_seed_gives_the_identical_frame_and_another_seed_does_not() -> None:
    first, again, other = generate(4000, seed=5), generate(4000, seed=5), generate(4000, seed=6)
    assert _same_frames(first, again)
    assert not _same_frames(first, other)
    assert not np.array_equal(first["input_tokens"], other["input_tokens"])


def test_frame_matches_the_canonical_schema(demo: pd.DataFrame) -> None:
    assert len(demo) == 150_000
    assert set(demo.columns) <= set(schema.CANONICAL)
    assert {"product", "session_id", "turn", "timestamp", "input_tokens", "output_tokens", "cached_tokens",
            "hash_ids", "model"} == set(demo.columns)
    for column in demo.columns:
        assert demo[column].dtype == schema.DTYPES[column], column
    assert demo["input_tokens"].min() >= 1 and demo["output_tokens"].min() >= 1
    assert (demo["cached_tokens"] <= demo["input_tokens"]).all()
    assert all(isinstance(h, np.ndarray) and h.dtype == np.int64 for h in demo["hash_ids"].iloc[:2000])


def test_every_product_of_the_data_file_is_in_the_demo_with_its_share(demo: pd.DataFrame) -> None:
    shares = demo["product"].value_counts(normalize=True)
    for name, profile in PROFILES["products"].items():
        assert shares[name] == pytest.approx(profile["share"], abs=1e-4), name
    assert shares.idxmax() == "support-chat"  # chat is the biggest product
    assert {p["shape"] for p in PROFILES["products"].values()} == {"chat", "rag", "reasoning", "agent", "autocomplete"}


def test_products_pick_a_subset_by_name_or_by_shape() -> None:
    frame = generate(3000, products=["doc-search", "reasoning"])
    assert set(frame["product"].unique()) == {"doc-search", "code-assistant"}
    assert len(frame) == 3000
    # single requests only: the log carries no session columns
    assert "session_id" not in frame.columns and "turn" not in frame.columns


@pytest.mark.parametrize("call, needle", [
    (lambda: generate(0), "n_requests=0"),
    (lambda: generate(10, seed=-1), "seed=-1"),
    (lambda: generate(10, days=0), "days=0"),
    (lambda: generate(10, days=float("nan")), "days=nan"),
    (lambda: generate(10, products=["billing-bot"]), "'billing-bot'"),
    (lambda: scenario("rag"), "'rag'"),
])
def test_bad_arguments_raise_one_clear_line(call, needle: str) -> None:
    with pytest.raises(ValueError, match=needle) as info:
        call()
    assert "\n" not in str(info.value)


# --- the published statistics ------------------------------------------------------------------------------

@pytest.mark.parametrize("product", list(PROFILES["products"]))
def test_each_product_lands_on_its_published_p50s_and_in_its_corner(demo: pd.DataFrame, product: str) -> None:
    target = PROFILES["products"][product]["target"]
    p50_in, p50_out = _p50(demo, product)
    assert p50_in == pytest.approx(target["input_p50"], rel=0.15)
    assert p50_out == pytest.approx(target["output_p50"], rel=0.15)
    assert corner_of(p50_in, p50_out) == PROFILES["products"][product]["corner"]


def test_chat_and_autocomplete_look_like_the_azure_traces(demo: pd.DataFrame, trace) -> None:
    pairs = {"support-chat": "azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
             "ide-autocomplete": "azure_llm_2023/AzureLLMInferenceTrace_code.csv"}
    for product, relative in pairs.items():
        real = pd.read_csv(trace(relative))
        ours = demo[demo["product"] == product]
        for ours_col, real_col in (("input_tokens", "ContextTokens"), ("output_tokens", "GeneratedTokens")):
            for q in (0.5, 0.9):
                assert ours[ours_col].quantile(q) == pytest.approx(real[real_col].quantile(q), rel=0.15), \
                    (product, ours_col, q)


def test_rag_tail_follows_the_mooncake_conversation_trace(demo: pd.DataFrame, trace) -> None:
    real = pd.read_json(trace("mooncake_fast25/conversation_trace.jsonl.gz"), lines=True)
    real_ratio = real["input_length"].quantile(0.9) / real["input_length"].median()
    ours = demo.loc[demo["product"] == "doc-search", "input_tokens"]
    assert ours.quantile(0.9) / ours.median() == pytest.approx(real_ratio, rel=0.15)


def test_agent_context_grows_turn_after_turn_and_is_mostly_cached(demo: pd.DataFrame, trace) -> None:
    agent = demo[demo["product"] == "swe-agent"]
    by_turn = agent.groupby("turn")["input_tokens"].median()
    early = by_turn.loc[[0, 2, 5, 10, 20]].to_numpy()
    assert (np.diff(early) > 0).all(), early
    assert by_turn.loc[20] > 3 * by_turn.loc[0]
    # most of an agent round's input is the previous round's context, served from the prefix cache; the real
    # Claude Code / Codex example serves 92 % of its input tokens from cache
    real = pd.read_json(trace("tracelab_example/round_trace.jsonl"), lines=True)
    real_share = real["prefix_tokens"].sum() / real["input_tokens_total"].sum()
    ours_share = agent["cached_tokens"].sum() / agent["input_tokens"].sum()
    assert ours_share == pytest.approx(real_share, abs=0.06)


def test_agent_cached_tokens_are_the_previous_rounds_context(demo: pd.DataFrame) -> None:
    agent = demo[demo["product"] == "swe-agent"].sort_values(["session_id", "turn"])
    previous = agent.groupby("session_id", observed=True)["input_tokens"].shift()
    later = agent["turn"] > 0
    grew = later & (agent["input_tokens"] > previous)  # not a compaction
    # whole blocks of the previous round's prompt are cached, the partial last block is not
    cached, prev = agent.loc[grew, "cached_tokens"].astype(int), previous[grew].astype(int)
    assert ((cached <= prev) & (cached > prev - BLOCK)).all()
    assert grew.sum() > 0.9 * later.sum()


def test_chat_sessions_carry_the_conversation_over(demo: pd.DataFrame) -> None:
    chat = demo[demo["product"] == "support-chat"].sort_values(["session_id", "turn"])
    sessions = chat.groupby("session_id", observed=True)
    follow_up = chat["turn"] > 0
    carried = sessions["input_tokens"].shift() + sessions["output_tokens"].shift()
    assert (chat.loc[follow_up, "input_tokens"] > carried[follow_up]).mean() > 0.99
    turns = sessions.size()
    assert turns.median() == 2 and turns.max() <= PROFILES["products"]["support-chat"]["sessions"]["max_turns"]


# --- prefix hashes -----------------------------------------------------------------------------------------

def test_hash_ids_follow_mooncake_semantics_and_agree_with_cached_tokens() -> None:
    frame = generate(6000, seed=2)
    lengths = frame["hash_ids"].map(len).to_numpy()
    assert (lengths == -(-frame["input_tokens"].to_numpy() // BLOCK)).all()
    # Replaying the log in time order, the leading blocks seen before are exactly the cached blocks (the first
    # request of each product finds a cold cache, so it is left out).
    seen: set[int] = set()
    first_of_product = ~frame["product"].duplicated()
    checked = 0
    for ids, cached, first in zip(frame["hash_ids"], frame["cached_tokens"], first_of_product):
        hit = np.isin(ids, np.fromiter(seen, dtype=np.int64)) if seen else np.zeros(len(ids), bool)
        leading = len(ids) if hit.all() else int(np.argmin(hit))
        assert hit[leading:].sum() == 0  # a seen block is always part of a leading run (prefix hashes)
        if not first:
            assert leading * BLOCK == cached
            checked += 1
        seen.update(ids.tolist())
        if checked > 1500:
            break


def test_a_products_shared_system_prompt_is_a_shared_prefix_and_products_do_not_share() -> None:
    frame = generate(5000, seed=4)
    rag = frame.loc[frame["product"] == "doc-search", "hash_ids"]
    system_blocks = PROFILES["products"]["doc-search"]["system_prompt_tokens"] // BLOCK
    heads = {tuple(h[:system_blocks]) for h in rag}
    assert system_blocks >= 1 and len(heads) == 1
    by_product = {p: set(np.concatenate(frame.loc[frame["product"] == p, "hash_ids"].to_list()).tolist())
                  for p in PROFILES["products"]}
    names = list(by_product)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not by_product[a] & by_product[b], (a, b)


def test_without_hashes_the_rest_of_the_frame_is_unchanged() -> None:
    with_h, without = generate(3000, seed=9), generate(3000, seed=9, with_hashes=False)
    assert "hash_ids" not in without.columns
    assert without.equals(with_h.drop(columns="hash_ids"))


# --- time ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("days", [1.0, 3.0])
def test_timestamps_are_sorted_inside_the_window_with_a_daily_cycle(days: float) -> None:
    frame = generate(60_000, seed=1, days=days, with_hashes=False)
    ts = frame["timestamp"]
    assert str(ts.dt.tz) == "UTC"
    assert ts.is_monotonic_increasing
    assert ts.min() >= START and ts.max() < START + pd.Timedelta(days=days)
    per_hour = ts.dt.hour.value_counts().reindex(range(24), fill_value=0)
    assert per_hour.max() > 2 * per_hour.min()
    # the trough is at night, the peak in the day (data file: peak hour UTC)
    peak = PROFILES["arrivals"]["diurnal_peak_hour_utc"]
    assert abs(((per_hour.idxmax() - peak) + 12) % 24 - 12) <= 4
    assert abs(((per_hour.idxmin() - peak - 12) + 12) % 24 - 12) <= 4


def test_sessions_turns_arrive_in_order() -> None:
    frame = generate(20_000, seed=3, with_hashes=False)
    sessions = frame.dropna(subset=["session_id"])
    assert sessions.groupby("session_id", observed=True)["turn"].apply(lambda t: t.is_monotonic_increasing).all()


def test_arrivals_are_burstier_than_poisson() -> None:
    frame = generate(20_000, seed=8, products=["rag"], with_hashes=False)
    gaps = frame["timestamp"].diff().dt.total_seconds().dropna().to_numpy()
    # inside one quiet hour the daily cycle barely moves the rate; Gamma bursts make the gaps vary more than
    # Poisson gaps (coefficient of variation 1)
    hour = frame["timestamp"].dt.hour.to_numpy()[1:]
    one = gaps[hour == 3]
    assert one.std() / one.mean() > 1.3


# --- scenarios -----------------------------------------------------------------------------------------------

def test_scenarios_are_listed_with_a_description() -> None:
    assert set(SCENARIOS) == {"rag_search", "coding_agent", "shared_pool", "mixed_product"}
    assert all(isinstance(d, str) and len(d) > 20 for d in SCENARIOS.values())


@pytest.mark.parametrize("name, product, p50_in, p50_out, corner", [
    ("rag_search", "rag-search", 6000, 150, "rag"),
    ("coding_agent", "coding-agent", 800, 2500, "reasoning"),
])
def test_seed_scenarios_land_on_their_p50s(name: str, product: str, p50_in: int, p50_out: int, corner: str) -> None:
    frame = scenario(name)
    assert len(frame) == 5000 and list(frame["product"].unique()) == [product]
    got_in, got_out = _p50(frame, product)
    assert got_in == pytest.approx(p50_in, rel=0.15) and got_out == pytest.approx(p50_out, rel=0.15)
    assert corner_of(got_in, got_out) == corner


def test_shared_pool_puts_two_corners_on_one_model() -> None:
    frame = scenario("shared_pool", n_requests=4000, seed=1)
    assert frame["model"].nunique() == 1
    corners = {p: corner_of(*_p50(frame, p)) for p in frame["product"].unique()}
    assert corners == {"rag-search": "rag", "coding-agent": "reasoning"}


def test_mixed_product_splits_one_product_between_two_corners_and_is_flagged() -> None:
    frame = scenario("mixed_product", n_requests=4000, seed=2)
    assert frame["product"].nunique() == 1
    shares = pd.Series(classify(frame["input_tokens"], frame["output_tokens"])).value_counts(normalize=True)
    assert shares["reasoning"] > 0.3 and shares["rag"] > 0.25
    # The one-click "Mixed product" scenario must show what it is named for.
    flags = find_clusters(frame).mixed_products
    assert [f.scope for f in flags] == ["assistant"] and len(flags[0].modes) == 2


def test_scenario_is_deterministic_for_a_seed() -> None:
    assert _same_frames(scenario("shared_pool", 1500, seed=4), scenario("shared_pool", 1500, seed=4))


# --- source-format logs --------------------------------------------------------------------------------------

LOG_CASES = [("log.csv", "csv"), ("log.tsv", "tsv"), ("log.parquet", "parquet"), ("log.jsonl", "jsonl"),
             ("log.json", "json"), ("log.csv.gz", "csv"), ("log.jsonl.zst", "jsonl")]


@pytest.mark.parametrize("name, fmt", LOG_CASES)
def test_write_log_round_trips_the_token_columns_with_pandas(tmp_path: Path, name: str, fmt: str) -> None:
    frame = generate(2000, seed=7)
    path = write_log(frame, tmp_path / name, fmt)
    assert path.exists()
    if fmt == "parquet":
        back = pd.read_parquet(path)
    elif fmt in ("csv", "tsv"):
        back = pd.read_csv(path, sep="\t" if fmt == "tsv" else ",")
    else:
        back = pd.read_json(path, lines=fmt == "jsonl")
    # source-style names, as an OpenAI-usage log flattens them
    assert {"timestamp", "model", "product", "prompt_tokens", "completion_tokens", "cached_tokens"} <= set(back.columns)
    assert (back["prompt_tokens"].to_numpy() == frame["input_tokens"].to_numpy()).all()
    assert (back["completion_tokens"].to_numpy() == frame["output_tokens"].to_numpy()).all()
    assert (back["cached_tokens"].to_numpy() == frame["cached_tokens"].to_numpy()).all()


@pytest.mark.parametrize("name, fmt", LOG_CASES)
def test_write_log_round_trips_through_ingest(tmp_path: Path, name: str, fmt: str) -> None:
    from shapeviz.ingest import load_log

    frame = generate(2000, seed=7)
    loaded = load_log(write_log(frame, tmp_path / name, fmt))
    assert loaded.report.rows_read == loaded.report.rows_kept == len(frame)
    back = loaded.frame
    for column in ("input_tokens", "output_tokens", "cached_tokens"):
        assert (back[column].to_numpy() == frame[column].to_numpy()).all(), column
    assert set(back["product"].unique()) == set(frame["product"].unique())
    assert (back["timestamp"] - frame["timestamp"]).abs().max() < pd.Timedelta(milliseconds=1)


def test_write_log_refuses_what_it_cannot_write(tmp_path: Path) -> None:
    frame = generate(100)
    with pytest.raises(ValueError, match="fmt='xlsx'"):
        write_log(frame, tmp_path / "log.xlsx", "xlsx")
    with pytest.raises(ValueError, match="parquet compresses inside"):
        write_log(frame, tmp_path / "log.parquet.gz", "parquet")
    with pytest.raises(ValueError, match="input_tokens"):
        write_log(frame.drop(columns="input_tokens"), tmp_path / "log.csv")


# --- the data file -------------------------------------------------------------------------------------------

def test_every_parameter_in_the_data_file_names_its_source() -> None:
    data = json.loads(PROFILES_PATH.read_text(encoding="utf-8"))
    for name, product in data["products"].items():
        for key in ("share", "system_prompt_tokens", "context_cap_tokens"):
            source_key = {"share": "share_source", "system_prompt_tokens": "system_prompt_source",
                          "context_cap_tokens": "context_cap_source"}[key]
            assert len(product.get(source_key, "")) > 10, (name, key)
        for key in ("sessions", "turn_gap_s", "first_input_tokens", "append_tokens", "output_tokens", "target"):
            assert len(product[key].get("source", "")) > 10, (name, key)
    assert sum(p["share"] for p in data["products"].values()) == pytest.approx(1.0)
    assert len(data["arrivals"]["diurnal_source"]) > 10 and len(data["arrivals"]["gamma_source"]) > 10


def test_the_data_files_azure_targets_are_the_real_traces_statistics(trace) -> None:
    conv = pd.read_csv(trace("azure_llm_2023/AzureLLMInferenceTrace_conv.csv"))
    code = pd.read_csv(trace("azure_llm_2023/AzureLLMInferenceTrace_code.csv"))
    chat, auto = PROFILES["products"]["support-chat"], PROFILES["products"]["ide-autocomplete"]
    assert chat["target"]["input_p50"] == pytest.approx(conv["ContextTokens"].median(), rel=0.01)
    assert chat["target"]["input_p90"] == pytest.approx(conv["ContextTokens"].quantile(0.9), rel=0.01)
    assert chat["output_tokens"]["max"] == conv["GeneratedTokens"].max()
    assert auto["first_input_tokens"]["p50"] == pytest.approx(code["ContextTokens"].median(), rel=0.01)
    assert auto["output_tokens"]["p90"] == pytest.approx(code["GeneratedTokens"].quantile(0.9), rel=0.01)


def test_write_log_into_a_buffer_reads_back_through_ingest() -> None:
    import io

    from shapeviz.ingest import load_log

    frame = scenario("shared_pool", 1000, seed=3)
    buffer = write_log(frame, io.BytesIO(), "parquet")
    loaded = load_log(buffer.getvalue(), name="shared_pool.parquet")
    assert loaded.report.rows_kept == 1000
    assert (loaded.frame["input_tokens"].to_numpy() == frame["input_tokens"].to_numpy()).all()
    assert loaded.frame["model"].nunique() == 1
