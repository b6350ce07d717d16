"""What leaves a capacity meeting, one module per format: safe CSVs (``csv``), PNG charts (``png``), the tables
(``tables``), replay traces (``replay``), the self-contained HTML memo (``html``) and the bundle of them all
(``bundle``: ``report_files``, ``build_bundle``, ``write_report``)."""
from __future__ import annotations

from shapeviz.outputs.report.bundle import (
    ZIP_DATE,
    Bundle,
    build_bundle,
    report_files,
    write_bundle,
    write_report,
    zip_bytes,
)
from shapeviz.outputs.report.csv import (
    FORMULA_PREFIXES,
    neutralise,
    safe_csv_bytes,
    safe_frame,
    write_csv,
)
from shapeviz.outputs.report.html import inert_figure, memo_html
from shapeviz.outputs.report.png import (
    PNG_SCALE,
    PNG_WIDTH,
    browser_path,
    figures_to_png,
    png_size,
)
from shapeviz.outputs.report.replay import (
    Replay,
    replay_jsonl,
    replay_trace,
    replay_vidur_csv,
)
from shapeviz.outputs.report.tables import (
    clusters_table,
    load_report_table,
    plan_table,
    products_table,
    recommendations_table,
)

__all__ = [
    "FORMULA_PREFIXES", "ZIP_DATE", "PNG_SCALE", "PNG_WIDTH", "Bundle", "Replay", "browser_path", "build_bundle",
    "clusters_table", "figures_to_png", "inert_figure", "load_report_table", "memo_html", "neutralise",
    "plan_table", "png_size", "products_table", "recommendations_table", "replay_jsonl", "replay_trace",
    "replay_vidur_csv", "report_files", "safe_csv_bytes", "safe_frame", "write_bundle", "write_csv",
    "write_report", "zip_bytes",
]
