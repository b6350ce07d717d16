"""GPU list prices per GPU-hour (``data/gpu_prices.csv``: dated, each with its source), editable per GPU."""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from functools import lru_cache

import pandas as pd

from shapeviz.datadir import DATA_DIR
from shapeviz.physics.catalogue import get_gpu


@lru_cache(maxsize=1)
def price_table() -> pd.DataFrame:
    """The price table: gpu, usd_per_gpu_hour, kind, as_of, source."""
    return pd.read_csv(DATA_DIR / "gpu_prices.csv")


def parse_prices(pairs: Iterable[str] | None) -> dict[str, float]:
    """``["h100=2.5", ...]`` → ``{"h100-sxm": 2.5}`` (catalogue ids); ValueError on bad input."""
    out: dict[str, float] = {}
    for pair in pairs or ():
        gpu, sep, value = str(pair).partition("=")
        try:
            price = float(value)
        except ValueError:
            price = float("nan")
        if not sep or not (math.isfinite(price) and price >= 0):
            raise ValueError(f"--gpu-hour-usd expects GPU=PRICE (e.g. --gpu-hour-usd h100=2.5), got {pair!r}")
        out[get_gpu(gpu.strip()).id] = price
    return out


def gpu_prices(gpus: Iterable[str], overrides: Mapping[str, float] | None = None) -> tuple[dict[str, float], dict[str, str]]:
    """Price per GPU-hour of each GPU and where it came from: the user, the dated table, or the catalogue's assumption."""
    table = {str(r.gpu): (float(r.usd_per_gpu_hour), f"{r.kind}, {r.as_of}: {r.source}")
             for r in price_table().itertuples(index=False)}
    prices, sources = {}, {}
    for g in gpus:
        gid = get_gpu(g).id
        if overrides and gid in overrides:
            prices[gid], sources[gid] = float(overrides[gid]), "set by user (--gpu-hour-usd)"
        elif gid in table:
            prices[gid], sources[gid] = table[gid]
        else:
            gpu = get_gpu(gid)
            prices[gid], sources[gid] = gpu.usd_per_gpu_hour, f"assumed (data/gpus.csv): {gpu.price_source}"
    return prices, sources
