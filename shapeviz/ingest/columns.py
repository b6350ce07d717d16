"""Column aliases of every log family we know, and the matching that maps a log's columns onto the frame.

The table below is data: one row per (canonical column, source name), in priority order, with the family that
uses the name and, for times and latencies, the unit the family writes. Matching ignores case, spaces and
punctuation (``Request tokens`` = ``request_tokens`` = ``requestTokens``) and also accepts a dotted suffix, so
``response.usage.prompt_tokens`` matches ``usage.prompt_tokens`` and aiperf's ``metrics.time_to_first_token.value``
matches ``time_to_first_token``.

Besides the canonical columns, a few helper names feed derivations: ``total_tokens`` (output = total − input),
``first_token_time`` / ``end_time`` (latencies from timestamps), ``cache_creation_input_tokens`` (Anthropic).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# canonical  source name  family  unit ("-" when not a time or latency, "?" when the family's unit varies)
_TABLE = """
input_tokens        input_tokens_total                     tracelab        -
input_tokens        ContextTokens                          azure           -
input_tokens        Request tokens                         burstgpt        -
input_tokens        input_length                           mooncake        -
input_tokens        num_prefill_tokens                     vidur           -
input_tokens        usage.prompt_tokens                    openai          -
input_tokens        gen_ai.usage.input_tokens              otel            -
input_tokens        gen_ai.usage.prompt_tokens             otel-old        -
input_tokens        llm.token_count.prompt                 openinference   -
input_tokens        usage_details.input                    langfuse        -
input_tokens        promptTokens                           langfuse        -
input_tokens        input_sequence_length                  aiperf          -
input_tokens        number_input_tokens                    llmperf         -
input_tokens        prompt_tokens                          helicone        -
input_tokens        usage.input_tokens                     openai-responses -
input_tokens        input_tokens                           anthropic       -
input_tokens        num_input_tokens                       generic         -
input_tokens        prompt_len                             generic         -
input_tokens        prompt_length                          generic         -
input_tokens        input_len                              generic         -
input_tokens        tokens_in                              generic         -
input_tokens        isl                                    generic         -
output_tokens       GeneratedTokens                        azure           -
output_tokens       Response tokens                        burstgpt        -
output_tokens       output_length                          mooncake        -
output_tokens       num_decode_tokens                      vidur           -
output_tokens       usage.completion_tokens                openai          -
output_tokens       gen_ai.usage.output_tokens             otel            -
output_tokens       gen_ai.usage.completion_tokens         otel-old        -
output_tokens       llm.token_count.completion             openinference   -
output_tokens       usage_details.output                   langfuse        -
output_tokens       completionTokens                       langfuse        -
output_tokens       output_sequence_length                 aiperf          -
output_tokens       number_output_tokens                   llmperf         -
output_tokens       completion_tokens                      helicone        -
output_tokens       usage.output_tokens                    openai-responses -
output_tokens       output_tokens                          anthropic       -
output_tokens       num_output_tokens                      generic         -
output_tokens       generated_tokens                       generic         -
output_tokens       completion_len                         generic         -
output_tokens       output_len                             generic         -
output_tokens       tokens_out                             generic         -
output_tokens       osl                                    generic         -
total_tokens        Total tokens                           burstgpt        -
total_tokens        usage.total_tokens                     openai          -
total_tokens        num_total_tokens                       vidur           -
total_tokens        gen_ai.usage.total_tokens              otel            -
total_tokens        llm.token_count.total                  openinference   -
total_tokens        usage_details.total                    langfuse        -
total_tokens        totalTokens                            langfuse        -
cached_tokens       prefix_tokens                          tracelab        -
cached_tokens       prompt_tokens_details.cached_tokens    openai          -
cached_tokens       input_tokens_details.cached_tokens     openai-responses -
cached_tokens       cache_read_input_tokens                anthropic       -
cached_tokens       gen_ai.usage.cache_read.input_tokens   otel            -
cached_tokens       gen_ai.usage.cache_read_input_tokens   otel            -
cached_tokens       llm.token_count.prompt_details.cache_read openinference -
cached_tokens       usage_details.cache_read_input_tokens  langfuse        -
cached_tokens       usage_details.input_cached_tokens      langfuse        -
cached_tokens       prompt_cache_hit_tokens                deepseek        -
cached_tokens       cached_input_tokens                    codex           -
cached_tokens       cached_tokens                          generic         -
cache_creation_input_tokens cache_creation_input_tokens    anthropic       -
timestamp           TIMESTAMP                              azure           ?
timestamp           arrived_at                             vidur           s
timestamp           request_created_at                     helicone        ?
timestamp           start_time                             langfuse        ?
timestamp           startTime                              langfuse        ?
timestamp           start_time_unix_nano                   otel            ns
timestamp           created_at                             generic         ?
timestamp           created                                openai          ?
timestamp           request_time                           generic         ?
timestamp           arrival_time                           generic         ?
timestamp           time                                   generic         ?
timestamp           ts                                     generic         ?
timestamp           datetime                               generic         ?
timestamp           date                                   generic         ?
first_token_time    completion_start_time                  langfuse        ?
first_token_time    completionStartTime                    langfuse        ?
first_token_time    first_token_time                       langsmith       ?
end_time            end_time                               langfuse        ?
end_time            endTime                                langfuse        ?
end_time            end_time_unix_nano                     otel            ns
end_time            completed_at                           generic         ?
ttft_ms             gen_ai.latency.time_to_first_token     vllm            s
ttft_ms             ttft_s                                 llmperf         s
ttft_ms             ttft_ms                                generic         ms
ttft_ms             time_to_first_token                    aiperf          ?
ttft_ms             timeToFirstToken                       langfuse        ?
ttft_ms             ttft                                   generic         ?
tpot_ms             inter_token_latency_s                  llmperf         s
tpot_ms             gen_ai.latency.time_per_output_token   vllm            s
tpot_ms             inter_token_latency                    aiperf          ?
tpot_ms             tpot_ms                                generic         ms
tpot_ms             itl_ms                                 generic         ms
tpot_ms             time_per_output_token                  generic         ?
tpot_ms             tpot                                   generic         ?
tpot_ms             itl                                    generic         ?
e2e_ms              Elapsed time                           burstgpt        s
e2e_ms              gen_ai.latency.e2e                     vllm            s
e2e_ms              end_to_end_latency_s                   llmperf         s
e2e_ms              e2e_latency_s                          generic         s
e2e_ms              e2e_ms                                 generic         ms
e2e_ms              request_latency                        aiperf          ?
e2e_ms              latency_ms                             generic         ms
e2e_ms              latency                                helicone        ms
e2e_ms              e2e_latency                            generic         ?
e2e_ms              duration_ms                            generic         ms
product             product                                generic         -
product             product_name                           generic         -
product             service.name                           otel            -
product             service_name                           generic         -
product             service                                generic         -
product             application                            generic         -
product             app_name                               generic         -
product             app                                    helicone        -
product             use_case                               generic         -
model               Model                                  burstgpt        -
model               gen_ai.response.model                  otel            -
model               gen_ai.request.model                   otel            -
model               llm.model_name                         openinference   -
model               provided_model_name                    langfuse        -
model               model_name                             generic         -
model               model_id                               generic         -
model               response.model                         openai          -
model               deployment                             generic         -
model               engine                                 generic         -
session_id          session_id                             tracelab        -
session_id          Session ID                             burstgpt        -
session_id          gen_ai.conversation.id                 otel            -
session_id          session.id                             openinference   -
session_id          conversation_id                        aiperf          -
session_id          thread_id                              langsmith       -
session_id          chat_id                                generic         -
session_id          conversation                           generic         -
session_id          session                                generic         -
turn                round_index                            tracelab        -
turn                turn_index                             aiperf          -
turn                turn                                   generic         -
turn                turn_number                            generic         -
turn                round                                  generic         -
status              status                                 generic         -
status              status_code                            generic         -
status              otel.status_code                       otel            -
status              http_status                            generic         -
status              response_status                        generic         -
status              level                                  langfuse        -
hash_ids            hash_ids                               mooncake        -
hash_ids            block_hashes                           generic         -
hash_ids            prefix_hashes                          generic         -
"""


@dataclass(frozen=True)
class Alias:
    """One source name for a canonical (or helper) column."""

    canonical: str
    name: str
    family: str
    unit: str | None   # "s", "ms", "us", "ns"; None when not a time, "?" when decided from the values


def _parse(table: str) -> tuple[Alias, ...]:
    rows = []
    for line in table.strip().splitlines():
        # canonical first, family and unit last: the name between them may hold spaces ("Request tokens")
        words = line.split()
        canonical, name, family, unit = words[0], " ".join(words[1:-2]), words[-2], words[-1]
        rows.append(Alias(canonical, name, family, None if unit == "-" else unit))
    return tuple(rows)


ALIAS_TABLE: tuple[Alias, ...] = _parse(_TABLE)

# canonical (or helper) column -> its source names, highest priority first
ALIASES: dict[str, tuple[str, ...]] = {}
for _alias in ALIAS_TABLE:
    ALIASES.setdefault(_alias.canonical, ())
    ALIASES[_alias.canonical] += (_alias.name,)

HELPERS: tuple[str, ...] = ("total_tokens", "first_token_time", "end_time", "cache_creation_input_tokens")

# relative arrival offsets are seconds, except in families that write milliseconds
RELATIVE_TIME_UNIT: dict[str, str] = {"mooncake": "ms"}

# columns that look like aliases but are not what they seem (TraceLab's turn_id is an opaque id, not an index)
NOT_ALIASES: frozenset[str] = frozenset({"turnid", "roundid"})


_NOT_KEY = re.compile(r"[^0-9a-z]")
_PART_SEP = re.compile(r"[./]")


def norm(name: str) -> str:
    """Case, space and punctuation-insensitive key: ``Request tokens`` → ``requesttokens``."""
    return _NOT_KEY.sub("", str(name).lower())


def _parts(name: str) -> list[str]:
    # dotted (or slashed) components, each normalised; a trailing ".value" (aiperf's {"value", "unit"}) is dropped
    parts = [k for k in (norm(p) for p in _PART_SEP.split(str(name))) if k]
    if len(parts) > 1 and parts[-1] == "value":
        parts = parts[:-1]
    return parts


def _tails(parts: list[str], longest: int) -> set[str]:
    """The joined last k parts of a column for every k, up to ``longest`` characters (no alias is longer).

    Joined, so that "gen_ai.usage.input_tokens" and "gen_ai_usage.input_tokens" both match.
    """
    out, tail = set(), ""
    for part in reversed(parts):
        tail = part + tail
        if len(tail) > longest:
            break
        out.add(tail)
    return out


_ALIAS_PARTS: dict[str, list[str]] = {a.name: _parts(a.name) for a in ALIAS_TABLE}
_LONGEST_ALIAS = max(len("".join(p)) for p in _ALIAS_PARTS.values())


def match_columns(columns: list[str]) -> dict[str, tuple[str, Alias]]:
    """canonical → (source column, alias that matched), exact names first, then dotted suffixes.

    Linear in the number of columns: each column is normalised once and indexed by its joined tails, and each
    alias looks its key up (a header of many thousand columns costs milliseconds, not minutes).
    """
    found: dict[str, tuple[str, Alias]] = {}
    claimed: set[str] = set()
    by_norm: dict[str, str] = {}
    for column in columns:
        by_norm.setdefault(norm(column), column)
    # pass 1: exact (normalised) names; a column claimed here is not offered to another canonical later
    for alias in ALIAS_TABLE:
        if alias.canonical in found:
            continue
        column = by_norm.get(norm(alias.name))
        if column is not None and column not in claimed:
            found[alias.canonical] = (column, alias)
            claimed.add(column)
    # pass 2: dotted suffixes, for nested exports (response.usage.prompt_tokens, attributes.gen_ai...); the
    # longest aliases go first, so attributes.gen_ai.response.model is taken as itself, not as a bare "model".
    # Each joined tail points at the columns ending in it, in column order, with their number of parts.
    by_tail: dict[str, list[tuple[int, str, int]]] = {}
    for index, column in enumerate(columns):
        if norm(column.split(".")[-1]) in NOT_ALIASES:
            continue
        parts = _parts(column)
        for tail in _tails(parts, _LONGEST_ALIAS):
            by_tail.setdefault(tail, []).append((index, column, len(parts)))
    for alias in sorted(ALIAS_TABLE, key=lambda a: -len(_ALIAS_PARTS[a.name])):
        ali = _ALIAS_PARTS[alias.name]
        if alias.canonical in found or not ali:
            continue
        for _, column, n_parts in by_tail.get("".join(ali), ()):
            if column not in claimed and len(ali) <= n_parts:
                found[alias.canonical] = (column, alias)
                claimed.add(column)
                break
    return found


def detect_columns(columns: list[str]) -> dict[str, str]:
    """What auto-detection maps: canonical (or helper) column → source column, for the UI's mapping editor."""
    return {canonical: column for canonical, (column, _) in match_columns([str(c) for c in columns]).items()}


def find_column(columns: list[str], wanted: str) -> str | None:
    """A user-named column: the exact name, else the one equal after ignoring case, spaces and punctuation."""
    if wanted in columns:
        return wanted
    matches = [c for c in columns if norm(c) == norm(wanted)]
    return matches[0] if matches else None


def unit_from_name(column: str) -> str | None:
    """A unit written in the column name itself (``ttft_s``, ``latency_ms``, ``startTimeUnixNano``), else None."""
    name = str(column).lower()
    if name.endswith(("unixnano", "unix_nano")):
        return "ns"
    match = re.search(r"(?:^|[_\s.\-(])(ms|millis|milliseconds|us|micros|ns|nanos|s|sec|secs|seconds)\)?$", name)
    if not match:
        return None
    return {"millis": "ms", "milliseconds": "ms", "micros": "us", "nanos": "ns", "sec": "s", "secs": "s",
            "seconds": "s"}.get(match.group(1), match.group(1))
