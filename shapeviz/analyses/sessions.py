"""Sessions and turns: how context grows across a conversation or an agent's tool rounds.

An agent resends its whole history every round, so turn k's prompt is turn k−1's prompt plus its answer plus
the new tool output: later rounds cost more prefill, hold more KV, and repeat most of what the cache already
has. Everything here reads the canonical frame's ``session_id`` (with ``turn`` when the log has it, else the
``timestamp`` order, else file order) and returns plain frames and dataclasses for the figures and the summary.

Definitions:

* **turn**: 0-based position of a request inside its session after ordering (ties keep file order).
* **growth_tokens**: input tokens of turn k − input tokens of turn k−1 (missing at turn 0).
* **repeated_tokens**: min(previous input + previous output, current input): the part of the prompt that
  repeats the previous context if the client resends the history verbatim (0 at turn 0).
* **context_tokens**: input + output of a turn, the KV the session holds once the turn finishes; the session's
  peak KV is its largest context × ``kv_bytes_per_token``.
* A session is one ``session_id`` (a conversation that switches model is still one conversation); per-product
  figures put a session under the product of its first turn.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
import pandas as pd

from shapeviz.workload.requests import has_sessions  # noqa: F401  (the request table's, named here too)

GB = 1e9

PrefillMs = Callable[[np.ndarray, np.ndarray], np.ndarray]

# Agent recognition defaults, and why:
# - an agent's tool loop runs at least observe -> act -> observe, so a session needs >= 3 turns; a chat user
#   asking one follow-up (2 turns) is not an agent;
# - "monotone-ish": context shrinks only when the agent summarises or truncates, so >= 70% of a session's steps
#   must grow (a 3-turn session needs both steps to grow; a 10-turn one may shrink twice);
# - "most sessions": at least half of a product's sessions must look like that;
# - and the product's median growth per turn must be above 0 tokens.
MIN_AGENT_TURNS = 3
MIN_GROWING_STEP_SHARE = 0.7
MIN_AGENT_SESSION_SHARE = 0.5
MIN_GROWTH_TOKENS = 0.0


def check_kv_bytes_per_token(kv_bytes_per_token: float | None) -> float | None:
    """``kv_bytes_per_token`` as a positive float (None passes through); ValueError otherwise."""
    if kv_bytes_per_token is None:
        return None
    value = float(kv_bytes_per_token)
    if not (np.isfinite(value) and value > 0):
        raise ValueError(
            f"kv_bytes_per_token={kv_bytes_per_token!r} must be a positive number of bytes "
            "(e.g. Deployment(model, gpu).kv_bytes_per_token)"
        )
    return value


def _check_max_turn(max_turn: int | None) -> None:
    if max_turn is not None and not (isinstance(max_turn, (int, np.integer)) and max_turn >= 0):
        raise ValueError(f"max_turn={max_turn!r} must be a turn index >= 0 (0 = first turn)")


def _categorical(col: pd.Series) -> pd.Categorical:
    """The column as a categorical (the canonical dtype already is one; anything else is converted once)."""
    values = col.array
    return values if isinstance(values, pd.Categorical) else pd.Categorical(col)


def session_turns(frame: pd.DataFrame, *, kv_bytes_per_token: float | None = None) -> pd.DataFrame:
    """One row per request that belongs to a session, ordered by session and turn, with growth columns.

    Columns: ``row`` (index label in ``frame``), ``product`` (of the session's first turn), ``session_id``,
    ``turn``, ``input_tokens``, ``output_tokens``, ``cached_tokens`` (when present), ``context_tokens``,
    ``growth_tokens`` (float, NaN at turn 0), ``repeated_tokens``, ``repeated_share``, and ``kv_bytes`` when
    ``kv_bytes_per_token`` is given.
    """
    kv = check_kv_bytes_per_token(kv_bytes_per_token)
    if not has_sessions(frame):
        raise ValueError("the frame has no session_id values; map a session/conversation id column to session_id")
    in_session = frame["session_id"].notna().to_numpy()
    sub = frame.loc[in_session]
    n = len(sub)
    sessions = _categorical(sub["session_id"])
    s_code = sessions.codes.astype(np.int64)
    # Order inside a session: the log's turn when it has one, then arrival time, then file order.
    keys: list[np.ndarray] = [np.arange(n)]
    if "timestamp" in sub.columns:
        ts = pd.to_datetime(sub["timestamp"], utc=True)
        t = ts.to_numpy(dtype="datetime64[ns]").view(np.int64).copy()
        t[ts.isna().to_numpy()] = np.iinfo(np.int64).max
        keys.append(t)
    if "turn" in sub.columns:
        keys.append(pd.to_numeric(sub["turn"]).to_numpy(dtype=np.float64, na_value=np.inf))
    order = np.lexsort(tuple(keys) + (s_code,))
    s_code = s_code[order]
    first = np.ones(n, dtype=bool)
    first[1:] = s_code[1:] != s_code[:-1]
    starts = np.flatnonzero(first)
    run = np.diff(np.r_[starts, n])
    turn = np.arange(n) - np.repeat(starts, run)
    if "product" in sub.columns:
        products = _categorical(sub["product"])
        row_product = products.codes[order]
        # the session's product: that of its first turn
        product = pd.Categorical.from_codes(np.repeat(row_product[starts], run), dtype=products.dtype)
    else:
        product = pd.Categorical(np.full(n, "all", dtype=object))

    inp = sub["input_tokens"].to_numpy(dtype=np.int64)[order]
    out = sub["output_tokens"].to_numpy(dtype=np.int64)[order]
    prev_in = np.r_[0, inp[:-1]]
    prev_out = np.r_[0, out[:-1]]
    growth = np.where(first, np.nan, (inp - prev_in).astype(np.float64))
    repeated = np.where(first, 0, np.minimum(prev_in + prev_out, inp))
    result = pd.DataFrame(
        {
            "row": sub.index.to_numpy()[order],
            "product": product,
            "session_id": pd.Categorical.from_codes(s_code, dtype=sessions.dtype),
            "turn": turn.astype(np.int64),
            "input_tokens": inp,
            "output_tokens": out,
        }
    )
    if "cached_tokens" in sub.columns:
        result["cached_tokens"] = sub["cached_tokens"].to_numpy()[order]
    result["context_tokens"] = inp + out
    result["growth_tokens"] = growth
    result["repeated_tokens"] = repeated
    result["repeated_share"] = np.divide(repeated, inp, out=np.zeros(n), where=inp > 0)
    if kv is not None:
        result["kv_bytes"] = result["context_tokens"].to_numpy(dtype=np.float64) * kv
    return result


def session_table(frame: pd.DataFrame, *, kv_bytes_per_token: float | None = None) -> pd.DataFrame:
    """One row per session: turns, first/last input, peak context and KV, growth per turn, growing-step share."""
    kv = check_kv_bytes_per_token(kv_bytes_per_token)
    return _table_from_turns(session_turns(frame), kv)


def _table_from_turns(turns: pd.DataFrame, kv: float | None) -> pd.DataFrame:
    steps = turns["growth_tokens"].notna()
    turns = turns.assign(grew=(turns["growth_tokens"] > 0).astype(np.float64).where(steps))  # NaN at turn 0
    g = turns.groupby(["session_id"], observed=True, sort=False)
    table = g.agg(
        product=("product", "first"),
        turns=("turn", "size"),
        first_input_tokens=("input_tokens", "first"),
        last_input_tokens=("input_tokens", "last"),
        peak_context_tokens=("context_tokens", "max"),
        total_input_tokens=("input_tokens", "sum"),
        repeated_tokens=("repeated_tokens", "sum"),
        growth_tokens_per_turn=("growth_tokens", "median"),
        growing_step_share=("grew", "mean"),
    ).reset_index()
    table = table[["product", "session_id", *[c for c in table.columns if c not in ("product", "session_id")]]]
    table["repeated_share"] = table["repeated_tokens"] / table["total_input_tokens"].where(
        table["total_input_tokens"] > 0
    )
    if kv is not None:
        table["kv_bytes_peak"] = table["peak_context_tokens"].to_numpy(dtype=np.float64) * kv
        table["kv_gb_peak"] = table["kv_bytes_peak"] / GB
    return table


def turn_profile(
    frame: pd.DataFrame, *, max_turn: int | None = None, kv_bytes_per_token: float | None = None
) -> pd.DataFrame:
    """Tidy frame for the growth chart: per (product, turn) the input-token p10/p50/p90 and growth p50.

    Columns: ``product``, ``turn``, ``sessions`` (how many sessions reach the turn), ``input_tokens_p10``,
    ``input_tokens_p50``, ``input_tokens_p90``, ``growth_tokens_p50`` (NaN at turn 0), ``repeated_share_p50``,
    plus ``kv_gb_p50`` and ``kv_gb_p90`` (context after the turn) when ``kv_bytes_per_token`` is given.
    """
    kv = check_kv_bytes_per_token(kv_bytes_per_token)
    _check_max_turn(max_turn)
    turns = session_turns(frame)
    if max_turn is not None:
        turns = turns[turns["turn"] <= max_turn]
    g = turns.groupby(["product", "turn"], observed=True, sort=True)
    inp = g["input_tokens"].quantile([0.1, 0.5, 0.9]).unstack()
    prof = pd.DataFrame(
        {
            "sessions": g.size(),
            "input_tokens_p10": inp[0.1],
            "input_tokens_p50": inp[0.5],
            "input_tokens_p90": inp[0.9],
            "growth_tokens_p50": g["growth_tokens"].median(),
            "repeated_share_p50": g["repeated_share"].median(),
        }
    )
    if kv is not None:
        ctx = g["context_tokens"].quantile([0.5, 0.9]).unstack()
        prof["kv_gb_p50"] = ctx[0.5] * kv / GB
        prof["kv_gb_p90"] = ctx[0.9] * kv / GB
    return prof.reset_index()


@dataclass(frozen=True)
class AgentVerdict:
    """Whether a product behaves like an agent (context growing turn after turn), with the evidence."""

    product: str
    is_agent: bool
    sessions: int
    turns_p50: float | None
    turns_max: int | None
    growth_tokens_per_turn_p50: float | None
    growing_session_share: float | None   # sessions with >= min_turns turns and monotone-ish growth
    repeated_share: float | None          # Σ repeated / Σ input over the product's session turns
    reason: str

    def to_dict(self) -> dict:
        """Plain JSON-safe dict."""
        return asdict(self)


def detect_agents(
    frame: pd.DataFrame,
    *,
    min_turns: int = MIN_AGENT_TURNS,
    min_growing_step_share: float = MIN_GROWING_STEP_SHARE,
    min_session_share: float = MIN_AGENT_SESSION_SHARE,
    min_growth_tokens: float = MIN_GROWTH_TOKENS,
) -> dict[str, AgentVerdict]:
    """Per product: is it an agent? Context grows per turn (median) and most sessions are long and growing."""
    if not (isinstance(min_turns, (int, np.integer)) and min_turns >= 2):
        raise ValueError(f"min_turns={min_turns!r} must be a whole number of turns >= 2")
    for name, value in (("min_growing_step_share", min_growing_step_share), ("min_session_share", min_session_share)):
        if not 0.0 <= float(value) <= 1.0:
            raise ValueError(f"{name}={value!r} must be a share in [0, 1]")
    products = (
        [str(p) for p in pd.unique(frame["product"].astype("object"))] if "product" in frame.columns else ["all"]
    )
    verdicts: dict[str, AgentVerdict] = {}
    if not has_sessions(frame):
        for p in products:
            verdicts[p] = AgentVerdict(
                p, False, 0, None, None, None, None, None,
                "The log has no session ids, so context growth across turns cannot be seen.",
            )
        return verdicts
    turns = session_turns(frame)
    table = _table_from_turns(turns, None)
    table["long_growing"] = (table["turns"] >= min_turns) & (table["growing_step_share"] >= min_growing_step_share)
    by_product = table.groupby("product", observed=True).agg(
        sessions=("turns", "size"),
        turns_p50=("turns", "median"),
        turns_max=("turns", "max"),
        long_growing=("long_growing", "mean"),
        repeated=("repeated_tokens", "sum"),
        total_input=("total_input_tokens", "sum"),
    )
    growth_p50 = turns.groupby("product", observed=True)["growth_tokens"].median()
    for p in products:
        if p not in by_product.index:
            verdicts[p] = AgentVerdict(
                p, False, 0, None, None, None, None, None,
                "None of this product's requests carry a session id, so context growth cannot be seen.",
            )
            continue
        row = by_product.loc[p]
        n = int(row["sessions"])
        share = float(row["long_growing"])
        growth = growth_p50.get(p, np.nan)
        growth = None if pd.isna(growth) else float(growth)
        k = int(round(share * n))
        grows = growth is not None and growth > min_growth_tokens
        is_agent = grows and share >= min_session_share
        if growth is None:
            reason = f"All {n} sessions have a single turn, so the context never grows."
        elif not grows:
            reason = f"Context does not grow across turns (median {growth:+,.0f} tokens per turn)."
        elif not is_agent:
            reason = (
                f"Context grows a median {growth:,.0f} tokens per turn, but only {k} of {n} sessions ({share:.0%}) "
                f"run >= {min_turns} turns with growing context (an agent needs at least {min_session_share:.0%})."
            )
        else:
            reason = (
                f"Context grows a median {growth:,.0f} tokens per turn and {k} of {n} sessions ({share:.0%}) run "
                f">= {min_turns} turns with growing context, the way an agent resends its history every round."
            )
        verdicts[p] = AgentVerdict(
            product=p,
            is_agent=bool(is_agent),
            sessions=n,
            turns_p50=float(row["turns_p50"]),
            turns_max=int(row["turns_max"]),
            growth_tokens_per_turn_p50=growth,
            growing_session_share=share,
            repeated_share=float(row["repeated"] / row["total_input"]) if row["total_input"] else None,
            reason=reason,
        )
    return verdicts


def ttft_by_turn(
    frame: pd.DataFrame,
    prefill_ms: PrefillMs,
    *,
    cached: Literal["reported", "none", "session_estimate"] = "reported",
    max_turn: int | None = None,
) -> pd.DataFrame:
    """Prefill time (TTFT without queueing) of turn k against the first turn, per product.

    ``prefill_ms(input_tokens, cached_tokens) -> ndarray`` is the capacity model's vectorised prefill time.
    ``cached`` picks the cached prefix each turn is given: the log's ``cached_tokens`` ("reported", 0 where the
    log has none), nothing ("none": every turn prefills its whole context), or the previous turn's context
    ("session_estimate"). Returns columns ``product``, ``turn`` (0 = first turn), ``requests``,
    ``ttft_ms_p50`` and ``ratio_to_turn_1`` (p50 over the first turn's p50).
    """
    if cached not in ("reported", "none", "session_estimate"):
        raise ValueError(f"cached={cached!r} must be 'reported', 'none' or 'session_estimate'")
    _check_max_turn(max_turn)
    if not callable(prefill_ms):
        raise ValueError(f"prefill_ms={prefill_ms!r} must be a callable (input_tokens, cached_tokens) -> ms array")
    turns = session_turns(frame)
    if max_turn is not None:
        turns = turns[turns["turn"] <= max_turn]
    inp = turns["input_tokens"].to_numpy(dtype=np.float64)
    if cached == "reported" and "cached_tokens" in turns.columns:
        cache = pd.to_numeric(turns["cached_tokens"]).to_numpy(dtype=np.float64, na_value=0.0)
    elif cached == "session_estimate":
        cache = turns["repeated_tokens"].to_numpy(dtype=np.float64)
    else:
        cache = np.zeros_like(inp)
    cache = np.minimum(cache, inp)
    ttft = np.asarray(prefill_ms(inp, cache), dtype=np.float64)
    if ttft.shape != inp.shape or not np.all(np.isfinite(ttft)):
        raise ValueError(
            f"prefill_ms returned shape {ttft.shape} (expected {inp.shape}) or non-finite times; it must map "
            "(input_tokens, cached_tokens) arrays to one time in ms per request"
        )
    df = pd.DataFrame({"product": turns["product"], "turn": turns["turn"], "ttft_ms": ttft})
    g = df.groupby(["product", "turn"], observed=True, sort=True)["ttft_ms"]
    out = pd.DataFrame({"requests": g.size(), "ttft_ms_p50": g.median()}).reset_index()
    first = out[out["turn"] == 0].set_index("product")["ttft_ms_p50"]
    base = out["product"].map(first).astype(np.float64)
    out["ratio_to_turn_1"] = out["ttft_ms_p50"] / base.where(base > 0)
    return out


def session_summary(frame: pd.DataFrame) -> dict | None:
    """The ``sessions`` block of ``summary --json``: count, turns p50, growth per turn p50; None without sessions."""
    if not has_sessions(frame):
        return None
    turns = session_turns(frame)
    per_session = turns.groupby("session_id", observed=True).size()
    growth = turns["growth_tokens"].median()
    return {
        "count": int(len(per_session)),
        "turns_p50": float(per_session.median()),
        "growth_tokens_per_turn_p50": None if pd.isna(growth) else float(growth),
    }
