"""Issue 41: memory follows the work, not what a file claims or how many names it holds; names shown as written."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from shapeviz.cli import main
from shapeviz.ingest import IngestError, Limits, load_log
from shapeviz.ingest.names import OTHER_PRODUCTS
from shapeviz.ingest.stream import columns_seen, iter_tables
from shapeviz.workload.sketch import merge_all, sketch_log

K8S_SCHEMA = Path(__file__).resolve().parents[1] / "data" / "k8s" / "schema_subset.json"


def _many_products_csv(path: Path, rows: int, products: int, seed: int = 0, prefix: str = "team") -> Path:
    rng = np.random.default_rng(seed)
    pd.DataFrame({
        "timestamp": pd.Timestamp("2025-01-01", tz="UTC") + pd.to_timedelta(np.sort(rng.random(rows)) * 3600, "s"),
        "input_tokens": rng.integers(10, 8000, rows),
        "output_tokens": rng.integers(1, 1000, rows),
        "product": [f"{prefix}-{p}" for p in rng.integers(0, products, rows)],
    }).to_csv(path, index=False)
    return path


def _summary(capsys, *args: str) -> dict:
    assert main(["summary", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_log_of_many_products_keeps_the_busiest_hundred_by_name(tmp_path, capsys):
    log = _many_products_csv(tmp_path / "many.csv", 4_000, 300)
    doc = _summary(capsys, str(log))
    names = [p["name"] for p in doc["products"]]
    assert len(names) == 101 and OTHER_PRODUCTS in names
    assert sum(p["requests"] for p in doc["products"]) == 4_000   # nothing lost: the rest is counted together
    assert any("the 100 busiest by requests keep their names" in n for n in doc["notes"])
    busiest = pd.read_csv(log)["product"].value_counts()
    assert busiest.index[0] in names


def test_sketches_of_several_logs_merge_to_at_most_the_busiest_products(tmp_path):
    # what the dashboard does with several uploads, and a long log with its chunks: sketches merged
    limits = Limits(max_products=50)
    parts = [sketch_log(_many_products_csv(tmp_path / f"part{i}.csv", 6_000, 3_000, seed=i), limits=limits).sketch
             for i in range(2)]
    merged = merge_all(parts, limits.max_products)
    assert merged.requests == 12_000
    assert len(merged.products) == 51 and OTHER_PRODUCTS in merged.products
    assert merged.counts.shape[0] == 51   # the grids follow the kept products, not the 6,000 names
    assert any("the 50 busiest by requests keep their names" in n for n in merged.report.notes)


def test_a_name_with_a_newline_adds_no_line_to_summary(tmp_path, capsys):
    log = tmp_path / "names.csv"
    pd.DataFrame({"input_tokens": [100, 200, 300, 400], "output_tokens": [10, 20, 30, 40],
                  "product": ["chat\nEVERY PRODUCT MEETS ITS CLASS", "safe\u202egnp.exe", "zero\u200bwidth",
                              "plain"]}).to_csv(log, index=False)
    assert main(["summary", str(log)]) == 0
    text = capsys.readouterr().out
    assert not any(line.startswith("EVERY") for line in text.splitlines())
    assert "chat\\u000aEVERY PRODUCT MEETS ITS CLASS" in text
    assert "safe\\u202egnp.exe" in text and "\u202e" not in text and "\u200b" not in text


def test_names_reach_csvs_with_their_escapes_visible(tmp_path):
    from shapeviz.outputs.report.csv import safe_csv_bytes

    frame = load_log(b"input_tokens,output_tokens,product\n10,5,\"safe\xe2\x80\xaegnp.exe\"\n", name="x.csv").frame
    table = frame.groupby("product", observed=True).size().rename("requests").reset_index()
    data = safe_csv_bytes(table).decode("utf-8")
    assert "safe\\u202egnp.exe" in data and "\u202e" not in data


def test_an_over_long_name_is_cut_and_said(tmp_path):
    log = tmp_path / "long.csv"
    pd.DataFrame({"input_tokens": [100, 200], "output_tokens": [10, 20],
                  "product": ["P" * 10_000, "short"]}).to_csv(log, index=False)
    loaded = load_log(log)
    names = list(loaded.frame["product"].cat.categories)
    assert max(len(n) for n in names) == 256 and names[0].endswith("…")
    assert any("longer than 256 characters cut" in n for n in loaded.report.notes)


def test_parquet_reads_only_the_columns_a_mapping_uses(tmp_path):
    n = 20_000
    payload = pa.array(["x" * 4_000] * 2, pa.string()).take(pa.array(np.zeros(n, np.int32)))
    path = tmp_path / "payload.parquet"
    pq.write_table(pa.table({"input_tokens": np.full(n, 100, np.int32), "output_tokens": np.full(n, 10, np.int32),
                             "prompt_text": payload, "team": payload}), path, store_schema=False)
    batches = list(iter_tables(str(path), "payload.parquet", Limits()))
    assert all("prompt_text" not in b.columns and "team" not in b.columns for b in batches)
    assert any("text columns no mapping uses were not read" in note for note in batches[0].notes)
    # the mapping editor still lists it (from the schema, nothing read), so the user can map it
    assert columns_seen(path.read_bytes(), path.name, Limits()) == ["input_tokens", "output_tokens", "prompt_text",
                                                                    "team"]
    # a column the user maps is read, as a category
    loaded = load_log(path, mapping={"product": "team"})
    assert loaded.frame["product"].cat.categories.tolist() == ["x" * 255 + "…"]


def test_a_gzipped_parquet_log_is_read_by_what_is_needed_like_a_plain_one(tmp_path):
    # a .parquet.gz used to be read whole: every column (a 4,000-byte text column in every row included), each
    # label one string per row; it now reads like the plain file: only what a mapping can use, row group by group
    import gzip

    n = 20_000
    payload = pa.array(["x" * 4_000] * 2, pa.string()).take(pa.array(np.zeros(n, np.int32)))
    plain = tmp_path / "payload.parquet"
    pq.write_table(pa.table({"input_tokens": np.full(n, 100, np.int32), "output_tokens": np.full(n, 10, np.int32),
                             "prompt_text": payload, "team": payload}), plain, row_group_size=5_000)
    packed = tmp_path / "payload.parquet.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    batches = list(iter_tables(str(packed), packed.name, Limits()))
    assert len(batches) == 4 and all("prompt_text" not in b.columns for b in batches)
    assert any("text columns no mapping uses were not read" in note for note in batches[0].notes)
    assert load_log(packed).report.notes == load_log(plain).report.notes
    with pytest.raises(IngestError, match="rows exceed the limit of 10,000"):
        load_log(packed, limits=Limits(max_rows=10_000))


def test_a_parquet_log_of_several_row_groups_says_each_note_once_on_every_path(tmp_path):
    # every row group is a batch, and every batch says which text columns were left unread: the dashboard's
    # reading (sketch_log) and load_log join the batches alike, so the user reads the note once, on both
    path = tmp_path / "groups.parquet"
    pq.write_table(pa.table({"input_tokens": np.full(300, 100, np.int32), "output_tokens": np.full(300, 10, np.int32),
                             "prompt_text": ["hello"] * 300}), path, row_group_size=100)
    loaded, sketched = load_log(path), sketch_log(path)
    unread = [n for n in sketched.sketch.report.notes if "text columns no mapping uses were not read" in n]
    assert len(unread) == 1 and sketched.sketch.report.notes == loaded.report.notes, sketched.sketch.report.notes


def test_an_arrow_error_building_a_small_logs_frame_is_not_called_running_out_of_memory(tmp_path, monkeypatch):
    import shapeviz.workload.sketch as sketch
    from shapeviz.ingest import IngestError

    def broken(*args, **kwargs):   # what a column arrow cannot convert would raise while the frame is built
        raise pa.ArrowInvalid("could not convert 'x' with type str")

    monkeypatch.setattr(sketch, "build_frame", broken)
    log = tmp_path / "log.csv"
    log.write_text("input_tokens,output_tokens\n100,10\n")
    with pytest.raises(IngestError) as info:
        sketch_log(log)
    assert "could not be read (ArrowInvalid" in str(info.value) and "memory" not in str(info.value), str(info.value)


@pytest.mark.parametrize("when", ["1678-01-01T00:00:00Z", "2261-06-01T00:00:00Z"])
def test_timestamps_pandas_holds_but_no_clock_wrote_are_counted_not_a_crash(tmp_path, capsys, when):
    log = tmp_path / "times.csv"
    log.write_text(f"timestamp,input_tokens,output_tokens\n{when},10,5\n2025-01-01T00:00:00Z,20,5\n"
                   "2025-01-01T00:00:01Z,30,5\n")
    doc = _summary(capsys, str(log))
    assert doc["rows"]["kept"] == 3
    assert any("1 times before 1970 or from 2100 on were not used" in n for n in doc["notes"])


def test_pools_whose_names_collide_after_sanitising_get_one_object_each(tmp_path, capsys):
    log = tmp_path / "log.csv"
    rng = np.random.default_rng(3)
    pd.DataFrame({"timestamp": pd.Timestamp("2025-01-01", tz="UTC") + pd.to_timedelta(np.arange(400), "s"),
                  "input_tokens": rng.integers(100, 2000, 400), "output_tokens": rng.integers(10, 300, 400),
                  "product": ["a", "b"] * 200}).to_csv(log, index=False)
    fleet = {"model": "llama-3.1-70b", "pools": [
        {"name": "Chat!", "products": ["a"], "gpu": "h100-sxm", "tp": 2, "replicas": 1},
        {"name": "chat?", "products": ["b"], "gpu": "h100-sxm", "tp": 2, "replicas": 1}]}
    fleet_file = tmp_path / "fleet.json"
    fleet_file.write_text(json.dumps(fleet))
    assert main(["config", str(log), "--fleet", str(fleet_file), "--engine", "vllm", "--k8s", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    schema = json.loads(K8S_SCHEMA.read_text())
    objects = [o for pool in doc["pools"] for o in yaml.safe_load_all(pool["manifest"]) if o]
    for o in objects:
        jsonschema.validate(o, schema)
    # what `kubectl apply` keys on: one Deployment and one Service per pool, none replacing another
    deployments = [o["metadata"]["name"] for o in objects if o["kind"] == "Deployment"]
    services = [o["metadata"]["name"] for o in objects if o["kind"] == "Service"]
    assert len(set(deployments)) == len(deployments) == 2 and len(set(services)) == len(services) == 2
    assert deployments == ["llm-chat-vllm-colocated", "llm-chat-2-vllm-colocated"]   # stable: file order


def test_a_result_file_of_millions_of_empty_objects_is_refused_before_it_is_built():
    from shapeviz.outputs.measured import MAX_RESULT_CONTAINERS, parse_result

    bomb = b'{"benchmarks":[' + b",".join([b"{}"] * (MAX_RESULT_CONTAINERS + 10)) + b"]}"
    with pytest.raises(ValueError, match="holds more than 2,000,000 JSON objects and arrays"):
        parse_result(bomb, "results.json")


def test_the_page_says_when_products_are_counted_together(tmp_path):
    from tests.app.dashboard import open_app

    log = _many_products_csv(tmp_path / "many.csv", 1_200, 200)
    at = open_app()
    at.file_uploader(key="uploads").set_value((log.name, log.read_bytes(), "text/csv"))
    at.run(timeout=180)
    assert not at.exception, at.exception
    shown = [i.value.replace("\\", "") for i in at.info]
    assert any("the 100 busiest by requests keep their names" in s and OTHER_PRODUCTS in s for s in shown), shown


def test_a_file_name_with_control_characters_never_reaches_the_terminal(tmp_path, capsys):
    # labels inside the log are made visible at ingest; what the command line prints besides (the file's own
    # name, here) still goes through terminal_text
    log = tmp_path / "\x1b]0;owned\x07\x1b[31mred.csv"
    log.write_text("input_tokens,output_tokens\n100,10\n200,20\n")
    assert main(["summary", str(log)]) == 0
    out = capsys.readouterr().out
    assert "red.csv" in out and not any(c in out for c in "\x1b\x07")


def test_several_uploads_together_keep_at_most_the_busiest_products(tmp_path):
    from shapeviz.ingest import combine

    logs = [load_log(_many_products_csv(tmp_path / f"part{i}.csv", 800, 80, seed=i, prefix=f"team{i}"))
            for i in range(3)]
    assert all(log.frame["product"].nunique() == 80 for log in logs)   # each file alone is under the bound
    combined = combine(logs)
    assert combined.frame["product"].nunique() == 101 and len(combined.frame) == 2_400
    assert any(OTHER_PRODUCTS in n for n in combined.report.notes)


def test_results_uploads_count_against_the_sessions_upload_budget(monkeypatch):
    from components import data
    from tests.app.dashboard import open_page

    monkeypatch.setattr(data, "SESSION_UPLOAD_BYTES", 4_096)   # as if the session had read its budget already
    report = Path(__file__).resolve().parents[1] / "data" / "measured" / "guidellm_0.8.1_report.json"
    at = open_page("pages/report.py")
    at.file_uploader(key="measured-report").set_value([(report.name, report.read_bytes(), "application/json")])
    at.run()
    assert not at.exception, at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "one session may read at once" in errors[0]
    assert not [df for df in at.dataframe if "TTFT p90 measured" in df.value.columns]   # nothing was parsed


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def test_a_parquet_footer_that_understates_its_rows_is_counted_on_what_is_read(tmp_path):
    import io
    import struct

    from shapeviz.ingest import IngestError

    rows, claimed = 300_000, 20_000
    buffer = io.BytesIO()
    pq.write_table(pa.table({"input_tokens": np.full(rows, 100, np.int32),
                             "output_tokens": np.full(rows, 10, np.int32)}), buffer, row_group_size=100_000)
    data = bytearray(buffer.getvalue())
    # FileMetaData.num_rows (Thrift compact: field 3, i64, zigzag varint) rewritten to a smaller count of the same
    # width; the row groups keep their true counts, which is what a reader reads
    start = len(data) - 8 - struct.unpack("<I", data[-8:-4])[0]
    at = bytes(data[start:-8]).index(b"\x16" + _varint(2 * rows)) + start + 1
    data[at:at + 3] = _varint(2 * claimed)
    path = tmp_path / "liar.parquet"
    path.write_bytes(bytes(data))
    assert pq.ParquetFile(path).metadata.num_rows == claimed
    with pytest.raises(IngestError, match="rows read so far exceed the limit of 100,000"):
        load_log(path, limits=Limits(max_rows=100_000))


def test_running_out_of_memory_is_one_line_not_a_traceback(tmp_path, capsys, monkeypatch):
    import shapeviz.outputs.summary as summary

    def exhausted(*args, **kwargs):   # what an analysis past every bound would raise
        raise MemoryError

    monkeypatch.setattr(summary, "summarize", exhausted)
    log = tmp_path / "log.csv"
    log.write_text("input_tokens,output_tokens\n100,10\n")
    assert main(["summary", str(log)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not fit in this machine's memory" in err


def test_long_distinct_parquet_names_are_cut_as_they_are_read(tmp_path):
    # 40,000 distinct 4,000-character product names: 160 MB once read, a few hundred KB on disk
    path = tmp_path / "names.parquet"
    schema = pa.schema([("input_tokens", pa.int32()), ("output_tokens", pa.int32()), ("product", pa.string())])
    with pq.ParquetWriter(path, schema, compression="zstd", store_schema=False) as writer:
        for group in range(2):
            names = pa.array([f"{'P' * 3990}{i:010d}" for i in range(group * 20_000, (group + 1) * 20_000)])
            writer.write_table(pa.table({"input_tokens": np.full(20_000, 100, np.int32),
                                         "output_tokens": np.full(20_000, 10, np.int32), "product": names},
                                        schema=schema))
    held = sum(b.table.nbytes for b in iter_tables(str(path), path.name, Limits()))
    assert held < 16 << 20   # ~257 characters a name are held, not 4,000
    loaded = load_log(path)
    assert max(len(n) for n in loaded.frame["product"].cat.categories) == 256
    assert any("longer than 256 characters cut" in n for n in loaded.report.notes)


def test_long_distinct_csv_names_are_cut_as_they_are_read(tmp_path):
    import gzip

    path = tmp_path / "names.csv.gz"
    with gzip.open(path, "wt") as out:   # ~80 MB of names once read, ~0.3 MB on disk
        out.write("input_tokens,output_tokens,product\n")
        out.writelines(f"100,10,{'P' * 3990}{i:010d}\n" for i in range(20_000))
    held = sum(b.table.nbytes for b in iter_tables(str(path), path.name, Limits()))
    assert held < 16 << 20   # ~257 characters a name are held, not 4,000
    doc_notes = load_log(path).report.notes
    assert any("longer than 256 characters cut" in n for n in doc_notes)
