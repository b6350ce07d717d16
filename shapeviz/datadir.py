"""Where the bundled catalogues and constants live: ``data/`` at the repository root, each file with its source."""
from __future__ import annotations

from pathlib import Path

DATA_DIR: Path = Path(__file__).resolve().parents[1] / "data"
