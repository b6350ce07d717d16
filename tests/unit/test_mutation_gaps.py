"""Behaviour no test pinned until a deliberate bug passed the suite (issue 31's mutation check): each test here is
named by a mutant in tests/mutants/mutants.toml and was seen failing on it."""
from __future__ import annotations

import numpy as np
import pytest

from shapeviz.analyses.shapes import DEFAULT_CORNERS, corner_of
from shapeviz.ingest import load_log
from shapeviz.physics.catalogue import get_model
from shapeviz.physics.steps import Deployment


# --- shapes: the boundaries belong where the corners say ---------------------------------------------------------
def test_a_request_exactly_on_a_boundary_is_in_the_corner_the_boundary_starts() -> None:
    """'long input starts at 4,096 tokens': a 4,096-token prompt with a short answer is RAG, one token less is chat;
    an answer of exactly 1,024 tokens is long (reasoning), of exactly 48 no longer autocomplete."""
    c = DEFAULT_CORNERS
    assert corner_of(c.long_input_tokens, 150, c) == "rag"
    assert corner_of(c.long_input_tokens - 1, 150, c) == "chat"
    assert corner_of(800, c.long_output_tokens, c) == "reasoning"
    assert corner_of(800, c.long_output_tokens - 1, c) == "chat"
    assert corner_of(800, c.short_output_tokens, c) == "chat"
    assert corner_of(800, c.short_output_tokens - 1, c) == "autocomplete"


# --- physics: KV per GPU ----------------------------------------------------------------------------------------
def test_kv_per_gpu_stops_shrinking_once_tp_passes_the_kv_heads() -> None:
    """Qwen2.5-7B has 4 KV heads: at TP8 each head lives on two GPUs, so a sequence costs each GPU what it does at
    TP4 (the KV of one head), not half of it; below 4 it falls as 1/TP."""
    model = get_model("qwen2.5-7b")
    assert model.kv_heads == 4
    per_gpu = {tp: float(Deployment("qwen2.5-7b", "h100-sxm", "bf16", None, tp).kv_bytes_per_gpu(8192.0))
               for tp in (1, 2, 4, 8)}
    assert per_gpu[2] == pytest.approx(per_gpu[1] / 2)
    assert per_gpu[4] == pytest.approx(per_gpu[1] / 4)
    assert per_gpu[8] == pytest.approx(per_gpu[4])


def test_sliding_window_layers_stop_growing_the_kv_past_their_window() -> None:
    """gpt-oss-20b: half its layers attend over a 128-token window. Past the window only the full layers grow, so
    doubling a long context adds half of what it would on a full-attention model."""
    model = get_model("gpt-oss-20b")
    assert model.sliding_window == 128 and model.sliding_layer_fraction == pytest.approx(0.5)
    dep = Deployment("gpt-oss-20b", "h100-sxm", "bf16", None, 1)
    kv = {c: float(dep.kv_bytes_per_sequence(float(c))) for c in (32, 64, 8192, 16384)}
    assert kv[64] == pytest.approx(2 * kv[32])          # inside the window every layer grows with the context
    per_token_all_layers = kv[64] / 64
    assert kv[16384] - kv[8192] == pytest.approx(0.5 * 8192 * per_token_all_layers)


# --- ingest: a latency column without a unit ------------------------------------------------------------------------
@pytest.mark.parametrize("values, expected_ms, unit", [
    ((0.21, 0.35, 0.48, 1.2), (210.0, 350.0, 480.0, 1200.0), "s"),
    ((210.0, 350.0, 480.0, 1200.0), (210.0, 350.0, 480.0, 1200.0), "ms"),
])
def test_a_latency_without_a_unit_is_read_by_its_size_and_the_guess_is_said(values, expected_ms, unit) -> None:
    """aiperf's ``time_to_first_token`` carries no unit in its name: a median under 10 reads as seconds, and the
    load report says which unit it took and why."""
    rows = "\n".join(f"{100 * (i + 1)},{20 + i},{v}" for i, v in enumerate(values))
    log = load_log(f"input_tokens,output_tokens,time_to_first_token\n{rows}\n".encode(), name="latency.csv")
    assert np.allclose(log.frame["ttft_ms"].to_numpy(dtype=float), expected_ms)
    assert any(n.startswith("ttft_ms: unit of 'time_to_first_token' not stated") and n.endswith(f"suggests {unit}")
               for n in log.report.notes), log.report.notes


# --- ingest: rows that cannot be requests ---------------------------------------------------------------------------
def test_a_row_with_negative_tokens_is_dropped_and_counted() -> None:
    """A negative prompt or answer length is not a request: it is dropped under ``negative_tokens``, never planned,
    and read = kept + dropped still holds."""
    body = "input_tokens,output_tokens\n100,20\n-5,20\n300,-7\n400,40\n"
    log = load_log(body.encode(), name="negative.csv")
    assert log.frame["input_tokens"].tolist() == [100, 400]
    assert log.frame["output_tokens"].tolist() == [20, 40]
    assert log.report.dropped.get("negative_tokens") == 2
    assert log.report.rows_read == 4 and log.report.balanced
