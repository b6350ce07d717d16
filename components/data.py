"""The session's data: demo, one-click scenarios or uploads, loaded once per content digest.

Caching sits here, at the I/O boundary, keyed on content: a digest of the uploaded bytes (or the scenario's
name and seed) plus the column mapping. Uploads are cached per *session* (``scope="session"``) so two browser
sessions never share an upload, and are dropped when the session ends; demo data is shared by everyone.
"""
from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass

import streamlit as st
from streamlit.runtime.uploaded_file_manager import UploadedFile

from shapeviz.ingest import LoadedLog, load_log
from shapeviz.synth import SCENARIOS, generate, scenario, write_log

DEMO_REQUESTS = 20_000
SCENARIO_REQUESTS = 6_000
SOURCE_KEY = "dataset"
UPLOAD_KEY = "uploads"
MAPPING_KEY = "mapping_override"
_FILE_DIGESTS = "_file_digests"

DATASETS: dict[str, str] = {
    "demo": "Demo mix (synthetic)",
    "rag_search": "RAG search",
    "coding_agent": "Coding agent",
    "shared_pool": "Both on one replica",
    "mixed_product": "Mixed product",
    "upload": "Your upload",
}


@dataclass(frozen=True)
class Dataset:
    """What the pages analyse: the loaded log and a digest that identifies its content."""

    log: LoadedLog
    digest: str
    label: str
    synthetic: bool


@st.cache_resource(max_entries=8, ttl=24 * 3600, show_spinner="Generating the demo log…")
def _load_generated(kind: str, seed: int = 0) -> LoadedLog:
    frame = generate(DEMO_REQUESTS, seed=seed) if kind == "demo" else scenario(kind, SCENARIO_REQUESTS, seed=seed)
    buffer = io.BytesIO()
    write_log(frame, buffer, fmt="parquet")
    # Generated data goes through the same reader as an upload, so the demo shows a real load report.
    return load_log(buffer.getvalue(), name=f"{kind}.parquet")


@st.cache_resource(max_entries=4, ttl=6 * 3600, scope="session", show_spinner="Reading your log…")
def _load_uploads(digest: str, mapping_items: tuple[tuple[str, str], ...],
                  _files: tuple[UploadedFile, ...]) -> LoadedLog:
    from shapeviz.ingest import combine

    mapping = dict(mapping_items) or None
    logs = [load_log(f.getvalue(), name=f.name, mapping=mapping) for f in _files]
    return logs[0] if len(logs) == 1 else combine(logs)


def upload_digest(files: list[UploadedFile]) -> str:
    """Content digest of a set of uploaded files (names included: they name the products).

    Each file's bytes are hashed once per upload, not on every rerun: a slider move must not re-read a 1 GB file.
    """
    known: dict[str, str] = st.session_state.setdefault(_FILE_DIGESTS, {})
    h = hashlib.sha256()
    for f in files:
        if f.file_id not in known:
            known[f.file_id] = hashlib.sha256(f.getbuffer()).hexdigest()
        h.update(f.name.encode("utf-8"))
        h.update(known[f.file_id].encode("ascii"))
    return h.hexdigest()[:16]


def current_dataset() -> Dataset | None:
    """The dataset the sidebar selected; raises IngestError for an unusable upload."""
    kind = st.session_state.get(SOURCE_KEY) or "demo"
    if kind == "upload":
        uploaded = st.session_state.get(UPLOAD_KEY) or []
        if not uploaded:
            return None
        known = st.session_state.get(_FILE_DIGESTS, {})
        for stale in set(known) - {f.file_id for f in uploaded}:  # bounded: only the files uploaded now
            del known[stale]
        mapping = tuple(sorted((st.session_state.get(MAPPING_KEY) or {}).items()))
        digest = upload_digest(list(uploaded)) + ("-" + hashlib.sha256(repr(mapping).encode()).hexdigest()[:6]
                                                  if mapping else "")
        log = _load_uploads(digest, mapping, tuple(uploaded))
        label = ", ".join(f.name for f in uploaded)
        return Dataset(log, digest, label, synthetic=False)
    if kind not in SCENARIOS and kind != "demo":
        kind = "demo"
    return Dataset(_load_generated(kind), f"gen-{kind}", DATASETS[kind], synthetic=True)
