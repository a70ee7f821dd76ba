"""Exact-length prompts: hit N tokens, unique prefixes, clear errors when N cannot be hit."""

from __future__ import annotations

import pytest

from servelab.bench.prompts import PromptBuilder, ServerTokenCounter, make_counter
from servelab.errors import BenchError
from servelab.testing.synthetic_server import SyntheticServer


class TwoPerWord:
    """A tokenizer where every word is two tokens: odd lengths are impossible."""

    source = "two tokens per word"

    def count(self, prompt: str) -> int:
        return 2 * len(prompt.split())


class CharCounter:
    """One token per character: the filler search must converge on non-unit steps."""

    source = "characters"

    def count(self, prompt: str) -> int:
        return len(prompt)


def test_server_counted_prompts_are_exact_and_unique() -> None:
    with SyntheticServer() as srv:
        counter = ServerTokenCounter(srv.base_url, "synthetic")
        try:
            b = PromptBuilder(counter, seed=0)
            prompts = [b.build(n) for n in (1, 7, 512, 512, 2048)]
            for p in prompts:
                assert counter.count(p.text) == p.target_len == p.counted_len
            firsts = [p.text.split()[0] for p in prompts]
            assert len(set(firsts)) == len(firsts)  # unique prefix per request
            assert b.min_len() == 1
        finally:
            counter.close()


def test_search_converges_when_words_are_not_one_token() -> None:
    b = PromptBuilder(CharCounter(), seed=3)
    for n in (40, 41, 333, 1000):
        p = b.build(n)
        assert len(p.text) == n


def test_unreachable_lengths_raise_bench_error() -> None:
    b = PromptBuilder(TwoPerWord())
    assert b.build(10).counted_len == 10
    with pytest.raises(BenchError, match="exactly 11 tokens"):
        b.build(11)
    with pytest.raises(BenchError, match="prefix"):
        PromptBuilder(TwoPerWord()).build(1)
    with pytest.raises(BenchError):
        b.build(0)


def test_no_tokenize_and_no_tokenizer_is_a_clear_error() -> None:
    with pytest.raises(BenchError, match="--tokenizer"):
        make_counter("auto", "http://127.0.0.1:9", "m", chat=False, tokenizer=None,
                     chat_template_kwargs=None)
