"""Open-loop profiles, trace replay, shared prefixes, multi-turn conversations and the
token cross-check, through `servelab bench` against the synthetic server."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from tests.bench.cli import servelab as _servelab

from servelab.errors import BenchError
from servelab.store import read_import_file
from servelab.testing.synthetic_server import Fault, FaultKind, SyntheticConfig, SyntheticServer


@pytest.fixture(scope="module")
def server() -> Any:
    with SyntheticServer(SyntheticConfig(ttft_s=0.005, itl_s=0.002)) as srv:
        yield srv


def _bench(srv: SyntheticServer, tmp_path: Path, *args: str) -> dict[str, Any]:
    out = tmp_path / "r.json"
    r = _servelab("bench", srv.base_url, "--output-len", "4", "--max-repeats", "1",
                  "--out", str(out), *args)
    assert r.returncode == 0, r.stderr
    data: dict[str, Any] = json.loads(out.read_text())
    assert data["token_check"]["ok"] and data["token_check"]["counters_compared"]
    return data


@pytest.mark.timeout(120)
def test_constant_rate_is_timed_from_the_schedule_with_lag_and_slo(
        server: SyntheticServer, tmp_path: Path) -> None:
    r = _servelab("bench", server.base_url, "--prompt-lens", "8", "--output-len", "4",
                  "--request-rate", "40", "--profile", "constant", "--concurrency", "64",
                  "--requests", "10", "--warmup", "0", "--max-repeats", "1",
                  "--slo", "ttft_p90=5000,e2el_p50=9000")
    assert r.returncode == 0, r.stderr
    assert "SLO ttft_p90<=5000ms,e2el_p50<=9000ms" in r.stdout and "pass" in r.stdout
    d = _bench(server, tmp_path, "--prompt-lens", "8", "--request-rate", "40", "--profile",
               "constant", "--concurrency", "64", "--requests", "10", "--warmup", "0",
               "--slo", "ttft_p90=5000")
    smp = d["points"][0]["samples"]
    sched = sorted(s["scheduled_ns"] for s in smp)
    assert [b - a for a, b in itertools.pairwise(sched)] == pytest.approx(
        [25_000_000] * 9, abs=2)  # exactly 1/rate apart: the schedule, not the sends
    assert all(s["send_ns"] >= s["scheduled_ns"] - 2_000_000 for s in smp)
    lag = d["points"][0]["metrics"]["dispatch_lag_ms"]
    assert lag["n"] == 10
    assert lag["max"] == pytest.approx(max((s["send_ns"] - s["scheduled_ns"]) / 1e6
                                           for s in smp))
    assert d["slo"]["points"][0]["verdict"] == "pass"
    assert d["slo"]["points"][0]["good"] == 10


@pytest.mark.timeout(120)
def test_trace_replay_sends_the_traced_lengths_at_the_traced_times(
        server: SyntheticServer, tmp_path: Path) -> None:
    tr = tmp_path / "trace.jsonl"
    rows = [(0, 12, 3), (40, 30, 5), (45, 12, 2), (200, 20, 6)]
    tr.write_text("".join(json.dumps({"timestamp": 5000 + t, "input_length": i,
                                      "output_length": o}) + "\n" for t, i, o in rows))
    d = _bench(server, tmp_path, "--prompt-lens", "8", "--trace", str(tr), "--warmup", "0",
               "--concurrency", "16")
    assert d["workload"]["profile"] == "trace"
    smp = sorted(d["points"][0]["samples"], key=lambda s: s["scheduled_ns"])
    assert [(s["prompt_tokens"], s["completion_tokens"]) for s in smp] == [
        (i, o) for _, i, o in rows]
    t0 = smp[0]["scheduled_ns"]
    assert [round((s["scheduled_ns"] - t0) / 1e6) for s in smp] == [0, 40, 45, 200]
    assert d["points"][0]["request_rate"] == pytest.approx(3 / 0.2)


@pytest.mark.timeout(120)
def test_shared_system_prompt_hits_the_prefix_cache(tmp_path: Path) -> None:
    # The synthetic server caches 16-word blocks: a 32-token shared prompt is 2 blocks.
    with SyntheticServer(SyntheticConfig(ttft_s=0.005, itl_s=0.002)) as srv:
        d = _bench(srv, tmp_path, "--prompt-lens", "64", "--shared-prefix", "32",
                   "--requests", "6", "--warmup", "1")
    sc = d["server_counters"]
    assert sc["prefix_cache_queries"] == 7 * 64
    assert sc["prefix_cache_hits"] == 6 * 32  # every request after the first
    assert sc["prefix_cache_hit_rate"] == pytest.approx(6 * 32 / (7 * 64))
    assert all(s["prompt_tokens"] == 64 for s in d["points"][0]["samples"])
    assert any("prefix cache: 42.9%" in n for n in d["notes"])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_multi_turn_history_carries_the_answers(tmp_path: Path, endpoint: str) -> None:
    with SyntheticServer(SyntheticConfig(ttft_s=0.005, itl_s=0.002)) as srv:
        d = _bench(srv, tmp_path, "--prompt-lens", "32", "--turns", "3", "--requests", "3",
                   "--warmup", "1", "--endpoint", endpoint)
        prompts = srv.prompts()
    chat = 3 if endpoint == "chat" else 0  # the synthetic template's tokens per message
    # completions: turn t is turn t-1's prompt, its 4-token answer and 32 new tokens; chat:
    # the same words as user / assistant / user messages, each message adding the template's
    # 3 tokens (the new message's 32 tokens are its content)
    want = [32, 68, 104] if not chat else [32, 32 + 4 + 3 + 32 + 3, 74 + 4 + 3 + 32 + 3]
    smp = d["points"][0]["samples"]
    assert [s["prompt_tokens"] for s in smp if not s["warmup"]] == want
    assert [s["send_ns"] for s in smp] == sorted(s["send_ns"] for s in smp)
    # the model's streamed answer follows the previous prompt verbatim in the next turn
    gen = prompts[-6:]  # the warm-up conversation, then the measured one
    for conv in (gen[:3], gen[3:]):
        for prev, nxt in itertools.pairwise(conv):
            assert nxt.startswith(prev + " tok tok tok tok "), (prev, nxt)
        assert [len(p.split()) + chat * msgs for p, msgs in zip(conv, (1, 3, 5), strict=True)
                ] == want
    sc = d["server_counters"]  # 2 conversations: turn t reuses turn t-1's full 16-word blocks
    assert sc["prefix_cache_queries"] == 2 * sum(want)
    words = [w - chat * msgs for w, msgs in zip(want, (1, 3, 5), strict=True)]
    assert sc["prefix_cache_hits"] == 2 * (words[0] // 16 * 16 + words[1] // 16 * 16)


def test_chat_history_goes_as_alternating_user_and_assistant_messages() -> None:
    from servelab.bench.client import BenchClient, ClientOptions, RequestSpec

    chat = BenchClient("http://127.0.0.1:9", ClientOptions(model="m", endpoint="chat"))
    spec = RequestSpec("q3", 30, 4, history=(("q1", "a1"), ("q2", "a2")))
    assert chat.body(spec)["messages"] == [
        {"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"},
        {"role": "user", "content": "q3"}]
    plain = BenchClient("http://127.0.0.1:9", ClientOptions(model="m"))
    assert plain.body(RequestSpec("q", 1, 4))["prompt"] == "q"
    with pytest.raises(BenchError, match="chat endpoint"):
        plain.body(spec)


@pytest.mark.timeout(120)
def test_a_rate_grid_runs_every_rate_as_its_own_point(server: SyntheticServer,
                                                      tmp_path: Path) -> None:
    d = _bench(server, tmp_path, "--prompt-lens", "8,16", "--request-rate", "20,40",
               "--profile", "gamma", "--burstiness", "0.5", "--concurrency", "4",
               "--requests", "4", "--warmup", "0", "--export-vllm", str(tmp_path / "v"))
    assert [(p["prompt_len"], p["request_rate"]) for p in d["points"]] == [
        (8, 20.0), (8, 40.0), (16, 20.0), (16, 40.0)]
    assert d["workload"]["request_rates"] == [20.0, 40.0]
    r = _servelab("runs", "import", str(tmp_path / "r.json"), "--db",
                  str(tmp_path / 'db.sqlite'))
    assert r.returncode == 0, r.stderr
    r = _servelab("runs", "export", "--db", str(tmp_path / 'db.sqlite'))
    assert r.returncode == 0, r.stderr
    (run,) = json.loads(r.stdout)["runs"]
    assert sorted({s["point"] for s in run["samples"]}) == [
        "p16-c4-r20-gamma0.5", "p16-c4-r40-gamma0.5", "p8-c4-r20-gamma0.5",
        "p8-c4-r40-gamma0.5"]
    # one vllm bench serve file per rate, each importing back to the same point
    files = sorted((tmp_path / "v").glob("*.json"))
    assert [f.name for f in files] == [
        "vllm-p16-o4-c4-r20-gamma0.5.json", "vllm-p16-o4-c4-r40-gamma0.5.json",
        "vllm-p8-o4-c4-r20-gamma0.5.json", "vllm-p8-o4-c4-r40-gamma0.5.json"]
    (imported,) = read_import_file(files[1])
    assert imported.points == ("p16-c4-r40-gamma0.5",)


@pytest.mark.timeout(60)
def test_server_client_token_mismatch_fails_loudly(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    cfg = SyntheticConfig(ttft_s=0.005, itl_s=0.002, fault=Fault(FaultKind.MISCOUNT, every=3))
    with SyntheticServer(cfg) as srv:
        r = _servelab("bench", srv.base_url, "--prompt-lens", "8", "--output-len", "4",
                      "--requests", "6", "--warmup", "0", "--max-repeats", "1",
                      "--out", str(out))
    assert r.returncode == 1
    assert "token counts disagree" in r.stderr and "26 generated tokens" in r.stderr
    tc = json.loads(out.read_text())["token_check"]
    assert not tc["ok"] and tc["client_completion_tokens"] == 24


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("args", "needle"), [
    (["--profile", "zipf"], "--profile"),
    (["--request-rate", "2", "--profile", "ramp"], "end rate"),
    (["--shared-prefix", "64", "--prompt-lens", "64"], "shared prefix"),
    (["--turns", "2", "--request-rate", "3"], "closed loop"),
    (["--request-rate", "1,x"], "--request-rate"),
    (["--request-rate", "1,0"], "--request-rate"),
    (["--request-rate", "1,1"], "repeat"),
    (["--request-rate", "1,2", "--profile", "ramp", "--ramp-end-rate", "4"], "own rates"),
    (["--slo", "ttft_p99"], "--slo"),
])
def test_bad_workload_options_exit_2(server: SyntheticServer, args: list[str],
                                     needle: str) -> None:
    r = _servelab("bench", server.base_url, *args)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_bad_trace_is_one_line_naming_the_file(server: SyntheticServer, tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": "soon"}\n')
    r = _servelab("bench", server.base_url, "--trace", str(p))
    assert r.returncode == 2 and "t.jsonl" in r.stderr and "line 1" in r.stderr


def _sharegpt(tmp_path: Path) -> Path:
    p = tmp_path / "sg.json"
    long = " ".join(f"w{i}" for i in range(60))
    p.write_text(json.dumps([
        {"conversations": [{"from": "human", "value": long},
                           {"from": "gpt", "value": "one two three"}]},
        {"conversations": [{"from": "gpt", "value": "no human turn"}]},
        {"conversations": [{"from": "human", "value": "short question here"},
                           {"from": "gpt", "value": "a b c d e"}]},
    ]))
    return p


@pytest.mark.timeout(120)
def test_sharegpt_prompts_cut_and_filled_to_exact_lengths(
        server: SyntheticServer, tmp_path: Path) -> None:
    d = _bench(server, tmp_path, "--dataset", str(_sharegpt(tmp_path)), "--prompt-lens", "24",
               "--requests", "4", "--warmup", "0", "--dataset-output", "reference")
    smp = d["points"][0]["samples"]
    assert all(s["prompt_tokens"] == 24 == s["prompt_len"] for s in smp)
    # the long text is cut, the short one filled; answers as long as the references
    assert sorted(s["completion_tokens"] for s in smp) == [3, 3, 5, 5]


@pytest.mark.timeout(120)
def test_jsonl_prompts_at_natural_length(server: SyntheticServer, tmp_path: Path) -> None:
    p = tmp_path / "d.jsonl"
    p.write_text('{"prompt": "alpha beta gamma", "output_len": 2}\n{"text": ""}\n'
                 '{"prompt": "one two three four five six"}\n')
    d = _bench(server, tmp_path, "--dataset", str(p), "--dataset-lengths", "natural",
               "--requests", "2", "--warmup", "0", "--dataset-output", "reference")
    got = sorted((s["prompt_tokens"], s["completion_tokens"]) for s in d["points"][0]["samples"])
    assert got == [(4, 2), (7, 4)]  # unique tag + the words; no reference → --output-len


def test_bad_dataset_is_one_line_naming_the_file(server: SyntheticServer,
                                                 tmp_path: Path) -> None:
    p = tmp_path / "d.jsonl"
    p.write_text('{"prompt": "x", "output_len": -1}\n')
    r = _servelab("bench", server.base_url, "--dataset", str(p))
    assert r.returncode == 2 and "d.jsonl" in r.stderr and "output_len" in r.stderr


@pytest.mark.timeout(120)
def test_depth_grid_puts_cached_context_before_the_new_tokens(tmp_path: Path) -> None:
    with SyntheticServer(SyntheticConfig(ttft_s=0.005, itl_s=0.002)) as srv:
        d = _bench(srv, tmp_path, "--prompt-lens", "16", "--depths", "0,64", "--requests", "3",
                   "--warmup", "1")
    assert [(p["prompt_len"], p["depth"]) for p in d["points"]] == [(16, 0), (16, 64)]
    deep = d["points"][1]["samples"]
    assert all(s["prompt_tokens"] == 80 for s in deep)
    sc = d["server_counters"]  # depth 0: nothing shared; depth 64: 4 blocks after the 1st
    assert sc["prefix_cache_hits"] == 3 * 64
    assert sc["prefix_cache_queries"] == 4 * 16 + 4 * 80
    # recorded in the store, each depth is its own point (label carries the depth)
    db = tmp_path / "runs.db"
    imp = _servelab("runs", "import", str(tmp_path / "r.json"), "--db", str(db), "--json")
    assert imp.returncode == 0, imp.stderr
    (rid,) = json.loads(imp.stdout)["added"]
    show = _servelab("runs", "show", rid, "--db", str(db), "--json", "--samples")
    assert show.returncode == 0, show.stderr
    run = json.loads(show.stdout)
    by_point: dict[str, int] = {}
    for smp in run["samples"]:
        by_point[smp["point"]] = by_point.get(smp["point"], 0) + 1
    assert by_point == {"p16-c1": 3, "p16-d64-c1": 3}
    assert {m["point"] for m in run["metrics"]} == {"p16-c1", "p16-d64-c1"}
