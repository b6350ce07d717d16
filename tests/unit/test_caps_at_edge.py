"""Every cap outside the ingest limits at its edge: the value at the cap accepted, one past it refused with its message.

``unit/test_limits_edges.py`` holds the ingest caps (``Limits``) lowered to the smallest log that reaches them. Here
are the caps a user meets at their real values: a fleet file's (pools, replicas, tensor parallelism, batch sizes,
prompt ranges), the documents' (a fleet file's or a plan's bytes, an integer's digits, nesting, YAML aliases), a
result file's (bytes, JSON containers), the products and names a log keeps by default, a session's upload budget,
and the files a server-side glob may name. A cap tested only far past its value (1e12, Infinity) lets a cap a
thousand times too high pass; one tested one past it does not.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from components import data
from shapeviz.fleet.pools import load_fleet
from shapeviz.ingest import documents, load_log, roots
from shapeviz.ingest.names import OTHER_PRODUCTS
from shapeviz.outputs import measured

MEASURED = Path(__file__).resolve().parents[1] / "data" / "measured"


def _fleet_file(tmp_path: Path, doc: dict, name: str = "fleet.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def _pool(**fields) -> dict:
    return {"name": "chat", "gpu": "h100-sxm", "replicas": 1, **fields}


# field of a pool -> (its value at the cap, the message one past it gives)
POOL_CAPS = {
    "replicas": (10_000, "pools[0].replicas must be a whole number from 1 to 10,000, got 10001"),
    "tp": (64, "pools[0].tp must be a whole number from 1 to 64, got 65"),
    "max_num_seqs": (65_536, "pools[0].max_num_seqs must be a whole number from 1 to 65,536, got 65537"),
    "max_num_batched_tokens": (1 << 24, "pools[0].max_num_batched_tokens must be a whole number from 1 to "
                                        "16,777,216, got 16777217"),
}


@pytest.mark.parametrize("field", POOL_CAPS)
def test_a_pool_setting_at_its_cap_is_read_and_one_past_it_is_refused_by_name(tmp_path, field):
    cap, says = POOL_CAPS[field]
    fleet = load_fleet(_fleet_file(tmp_path, {"pools": [_pool(**{field: cap})]}))
    assert getattr(fleet.pools[0], field) == cap
    with pytest.raises(ValueError) as refused:
        load_fleet(_fleet_file(tmp_path, {"pools": [_pool(**{field: cap + 1})]}))
    assert str(refused.value) == says


@pytest.mark.parametrize("side", ["prefill", "decode"])
@pytest.mark.parametrize("field, cap", [("replicas", 10_000), ("tp", 64)])
def test_a_split_pools_side_at_its_cap_is_read_and_one_past_it_is_refused(tmp_path, side, field, cap):
    def doc(value: int) -> dict:
        sides = {s: {"gpu": "h100-sxm", "replicas": 1, "tp": 1} for s in ("prefill", "decode")}
        sides[side][field] = value
        return {"pools": [_pool(**sides)]}

    fleet = load_fleet(_fleet_file(tmp_path, doc(cap)))
    assert getattr(getattr(fleet.pools[0], side), field) == cap
    with pytest.raises(ValueError, match=rf"^pools\[0\]\.{side}\.{field} must be a whole number from 1 to "
                                         rf"{cap:,}, got {cap + 1}$"):
        load_fleet(_fleet_file(tmp_path, doc(cap + 1)))


def test_a_prompt_range_up_to_two_to_the_31_is_read_and_one_past_it_is_refused(tmp_path):
    fleet = load_fleet(_fleet_file(tmp_path, {"pools": [_pool(input_tokens=[[0, 2**31]])]}))
    assert fleet.pools[0].input_tokens == ((0, 2**31),)
    with pytest.raises(ValueError, match=r"^pools\[0\]\.input_tokens must be a whole number from 0 to "
                                         r"2,147,483,648, got 2147483649$"):
        load_fleet(_fleet_file(tmp_path, {"pools": [_pool(input_tokens=[[0, 2**31 + 1]])]}))


def test_a_fleet_of_64_pools_is_read_and_65_are_refused(tmp_path):
    many = [_pool(name=f"pool-{i}") for i in range(65)]
    assert len(load_fleet(_fleet_file(tmp_path, {"pools": many[:64]})).pools) == 64
    with pytest.raises(ValueError, match=r"^a fleet file has at most 64 pools, got 65$"):
        load_fleet(_fleet_file(tmp_path, {"pools": many}))


def _padded(doc: dict, size: int) -> bytes:
    """``doc`` as JSON followed by spaces, ``size`` bytes in all."""
    text = json.dumps(doc).encode()
    return text + b" " * (size - len(text))


def test_a_fleet_file_of_16_mib_is_read_and_one_byte_more_is_refused(tmp_path):
    path = tmp_path / "fleet.json"
    path.write_bytes(_padded({"pools": [_pool()]}, 16 << 20))
    assert load_fleet(path).pools[0].name == "chat"
    path.write_bytes(_padded({"pools": [_pool()]}, (16 << 20) + 1))
    with pytest.raises(ValueError, match=r"^fleet file 'fleet\.json' is larger than 16 MiB; this is not a fleet file$"):
        load_fleet(path)


def test_a_plan_file_of_16_mib_is_read_and_one_byte_more_is_refused(tmp_path):
    path = tmp_path / "plan.json"
    path.write_bytes(_padded({"kind": "a plan"}, 16 << 20))
    assert documents.parse_json(documents.read_capped(path, "plan file"), "plan.json") == {"kind": "a plan"}
    path.write_bytes(_padded({"kind": "a plan"}, (16 << 20) + 1))
    with pytest.raises(ValueError, match=r"^plan file 'plan\.json' is larger than 16 MiB; this is not a plan file$"):
        documents.read_capped(path, "plan file")


@pytest.mark.parametrize("sign", ["", "-"])
def test_an_integer_of_30_digits_is_read_and_one_of_31_is_refused(sign):
    thirty = sign + "9" * 30
    assert documents.parse_json(f'{{"ttft_ms": {thirty}}}', "plan.json") == {"ttft_ms": int(thirty)}
    with pytest.raises(ValueError, match=r"^plan\.json: an integer of 3[12] digits is refused \(at most 30 digits\)$"):
        documents.parse_json(f'{{"ttft_ms": {thirty}9}}', "plan.json")


def test_a_fleet_files_target_of_30_digits_is_read_and_one_of_31_is_refused(tmp_path):
    def doc(digits: int) -> str:
        return '{"pools": [{"name": "chat"}], "slo": {"chat": {"ttft_ms": ' + "9" * digits + ', "tpot_ms": 50}}}'

    path = tmp_path / "fleet.json"
    path.write_text(doc(30))
    assert load_fleet(path).slo["chat"] == (float("9" * 30), 50.0)
    path.write_text(doc(31))
    with pytest.raises(ValueError, match=r"^fleet file 'fleet\.json': an integer of 31 digits is refused"):
        load_fleet(path)


def _nested(depth: int) -> str:
    """A JSON (and YAML flow) document of ``depth`` nested arrays."""
    return "[" * depth + "1" + "]" * depth


@pytest.mark.parametrize("parse", [documents.parse_json, documents.parse_yaml], ids=["json", "yaml"])
def test_a_document_nested_64_deep_is_read_and_65_is_refused(parse):
    inner = parse(_nested(64), "fleet.json")
    for _ in range(63):
        (inner,) = inner
    assert inner == [1]
    with pytest.raises(ValueError, match=r"^fleet\.json: nested more than 64 levels deep$"):
        parse(_nested(65), "fleet.json")


def _aliases(nodes: int) -> str:
    """A YAML document whose aliases expand to exactly ``nodes`` nodes: ``a``, an anchored list of 998 values
    (999 nodes), used 99 times by ``b``, and ``c``, a list of values making up the rest (94 at 100,000)."""
    anchored = "[" + ", ".join(["0"] * 998) + "]"
    # root (1) + key a (1) + the anchored list (999) + key b (1) + b's list (1 + 99 × 999) + key c (1) + c's list
    # (1 + its values): 99,905 nodes and the values of c
    rest = nodes - (1 + 1 + 999 + 1 + 1 + 99 * 999 + 1) - 1
    return (f"a: &a {anchored}\nb: [" + ", ".join(["*a"] * 99) + "]\nc: [" + ", ".join(["1"] * rest) + "]\n")


def test_a_yaml_file_whose_aliases_expand_to_100k_values_is_read_and_one_more_is_refused():
    doc = documents.parse_yaml(_aliases(100_000), "fleet.yaml")
    assert len(doc["b"]) == 99 and len(doc["a"]) == 998 and len(doc["c"]) == 94
    with pytest.raises(ValueError, match=r"^fleet\.yaml: its aliases expand to more than 100,000 values"):
        documents.parse_yaml(_aliases(100_001), "fleet.yaml")


def _result(size: int | None = None, containers_more: int = 0) -> bytes:
    """The guidellm report of tests/data/measured, with a string holding ``containers_more`` brackets (a bound
    counts brackets inside strings too) and padded with spaces to ``size`` bytes."""
    doc = json.loads((MEASURED / "guidellm_0.8.1_report.json").read_text())
    doc["note"] = "{" * containers_more
    text = json.dumps(doc).encode()
    return text if size is None else text + b" " * (size - len(text))


def test_a_result_file_of_256_mib_is_refused_past_the_cap_before_anything_is_parsed():
    with pytest.raises(ValueError, match=r"^report\.json: 256 MiB is larger than the 256 MiB a result file can be"):
        measured.parse_result(b" " * ((256 << 20) + 1), "report.json")   # one allocation: the size is read first


def test_a_result_file_exactly_at_the_cap_is_read(monkeypatch):
    # a 256 MiB file takes seconds to scan: the cap is lowered to the real report's size (the comparison's edge)
    report = _result()
    levels = measured.parse_result(report, "report.json")
    assert levels
    monkeypatch.setattr(measured, "MAX_RESULT_BYTES", len(report))
    assert measured.parse_result(report, "report.json") == levels
    with pytest.raises(ValueError, match=r"is larger than the 0 MiB a result file can be"):
        measured.parse_result(report + b" ", "report.json")


def test_a_result_of_two_million_json_containers_is_read_and_one_more_is_refused():
    plain = _result()
    held = plain.count(b"{") + plain.count(b"[")
    levels = measured.parse_result(plain, "report.json")
    assert measured.parse_result(_result(containers_more=2_000_000 - held), "report.json") == levels
    with pytest.raises(ValueError, match=r"^report\.json: holds more than 2,000,000 JSON objects and arrays"):
        measured.parse_result(_result(containers_more=2_000_001 - held), "report.json")


def _products_log(products: int, name_chars: int = 8) -> bytes:
    names = [f"{i:0{name_chars}d}" for i in range(products)]
    return pd.DataFrame({"input_tokens": 100, "output_tokens": 10, "product": names}).to_csv(index=False).encode()


def test_a_log_of_100_products_keeps_every_name_and_101_count_the_quietest_together():
    hundred = load_log(_products_log(100), name="a.csv")
    # the log's product list (the column's categories, what the pages list) is its hundred names, nothing folded
    assert sorted(hundred.frame["product"].cat.categories) == [f"{i:08d}" for i in range(100)]
    assert not any("busiest by requests keep their names" in n for n in hundred.report.notes)
    more = load_log(_products_log(101), name="a.csv")
    assert more.frame["product"].nunique() == 101 and OTHER_PRODUCTS in set(more.frame["product"])
    assert len(more.frame) == 101   # nothing lost: the quietest are counted together
    assert any("the 100 busiest by requests keep their names" in n for n in more.report.notes)


def test_a_name_of_256_characters_is_kept_whole_and_one_of_257_is_cut_and_said():
    whole = load_log(_products_log(2, name_chars=256), name="a.csv")
    assert sorted(whole.frame["product"].astype(str)) == [f"{i:0256d}" for i in range(2)]
    assert not any("characters cut" in n for n in whole.report.notes)
    cut = load_log(_products_log(2, name_chars=257), name="a.csv")
    names = sorted(cut.frame["product"].astype(str))
    assert [len(n) for n in names] == [256, 256] and all(n.endswith("…") for n in names)
    assert any("longer than 256 characters cut" in n for n in cut.report.notes)


def test_a_sessions_uploads_of_exactly_1_gib_are_read_and_one_byte_more_is_refused():
    files = [SimpleNamespace(name="a.parquet", size=600 << 20), SimpleNamespace(name="b.parquet", size=424 << 20)]
    data.check_upload_budget(files)   # 1 GiB together: read
    files[1].size += 1
    with pytest.raises(ValueError, match=r"^these 2 uploads hold 1\.0 GiB together, more than the 1 GiB one "
                                         r"session may read at once"):
        data.check_upload_budget(files)


def test_a_server_glob_naming_500_files_is_read_and_501_are_refused(tmp_path):
    for i in range(501):
        (tmp_path / f"log-{i:03d}.csv").touch()
    assert len(roots.resolve_server_paths("log-[0-4]*.csv", [tmp_path])) == 500
    with pytest.raises(ValueError, match=r"^'log-\*\.csv' matches more than 500 files; narrow the glob$"):
        roots.resolve_server_paths("log-*.csv", [tmp_path])

