"""Secret redaction: property tests over generated text, plus counts that must survive."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.store import REDACTED, redact, redact_args, redact_text

ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
filler = st.text(alphabet=ALNUM + " \n\t:=,.;/{}[]()'\"", max_size=60)
hf_tokens = st.text(alphabet=ALNUM, min_size=20, max_size=40).map(lambda s: "hf_" + s)
sk_keys = st.text(alphabet=ALNUM + "_-", min_size=20, max_size=48).map(lambda s: "sk-" + s)
secret_values = st.text(alphabet=ALNUM + "_-./+", min_size=6, max_size=40).filter(
    lambda s: not s.startswith("--")  # that would be the next flag, not a value
)
sep = st.sampled_from([" ", "\n", "\t", ", ", "; ", "(", "'", '"'])


@settings(max_examples=300, deadline=None)
@given(before=filler, after=filler, token=st.one_of(hf_tokens, sk_keys), s1=sep, s2=sep)
def test_token_shapes_never_survive(before: str, after: str, token: str, s1: str, s2: str) -> None:
    out = redact_text(f"{before}{s1}{token}{s2}{after}")
    assert token not in out


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(
        [
            "HF_TOKEN",
            "OPENAI_API_KEY",
            "api_key",
            "password",
            "hf-token",
            "Authorization",
            "SECRET",
            "access_key",
        ]
    ),
    op=st.sampled_from(["=", ": ", " = ", "="]),
    value=secret_values,
    before=filler,
)
def test_secret_assignments_never_survive(name: str, op: str, value: str, before: str) -> None:
    text = f"{before}\n{name}{op}{value}\n"
    # what follows the name is the marker alone (a value may itself be part of the marker's
    # text, "REDACT", so the test looks for what is left once the marker is taken out)
    assert value not in redact_text(text).split(f"{name}{op}", 1)[1].replace(REDACTED, "")
    doc = redact({"env": {name: value}, "args": [f"--{name.lower()}", value]})
    assert doc["env"][name] == REDACTED
    assert doc["args"] == [f"--{name.lower()}", REDACTED]


def test_counts_and_ordinary_text_are_kept() -> None:
    text = (
        "INFO KV cache size: 883,011 tokens\nprompt_tokens: 2048 max_tokens=256 "
        "max_num_batched_tokens=8192\nAvg generation throughput: 42.6 tokens/s\n"
        "model = nvidia/Qwen3.6-35B-A3B-NVFP4 tokenizer: Qwen/Qwen3.6-35B-A3B\n"
    )
    assert redact_text(text) == text
    args = ("--model", "x", "--max-num-batched-tokens", "8192", "--tokenizer", "y")
    assert redact_args(args) == args
    assert redact({"prompt_tokens": 12, "tokenizer": "Qwen/Q", "max_tokens": "256"}) == {
        "prompt_tokens": 12,
        "tokenizer": "Qwen/Q",
        "max_tokens": "256",
    }


def test_urls_lose_only_their_password() -> None:
    assert redact_text("db postgresql://bench:hunter22@db.lan:5432/results ok") == (
        f"db postgresql://bench:{REDACTED}@db.lan:5432/results ok"
    )


def test_per_token_units_and_rates_are_kept() -> None:
    # A stored plan carries bytes_per_token; bench results carry total_token_throughput.
    # Blanking them broke calibration from stored runs (found on the H200 run).
    doc = {"speed": {"decode": [{"context_len": 512, "bytes_per_token": 3_221_225_472}]},
           "total_token_throughput": 1234.5, "flops_per_token": 6.0e9, "hf_token": "abc123"}
    out = redact(doc)
    assert out["speed"] == doc["speed"]
    assert out["total_token_throughput"] == 1234.5 and out["flops_per_token"] == 6.0e9
    assert out["hf_token"] == "[REDACTED]"
    assert redact_text("bytes_per_token=3221225472 HF_TOKEN=abc") == (
        "bytes_per_token=3221225472 HF_TOKEN=[REDACTED]")
