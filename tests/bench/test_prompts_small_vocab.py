"""Exact prompt lengths with a small-vocabulary tokenizer (filler words of several tokens).

A tiny model's byte-level BPE splits most filler words into several tokens, so the word
count alone steps over most targets; the builder must close the gap with short units.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.bench.prompts import PromptBuilder, make_counter
from servelab.synth.tiny import make_tiny_model


@pytest.fixture(scope="module")
def tiny_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model("llama", tmp_path_factory.mktemp("tok") / "llama")


@pytest.mark.parametrize("chat", [False, True])
def test_every_length_is_hit_exactly(tiny_tokenizer_dir: Path, chat: bool) -> None:
    counter = make_counter("local", "http://127.0.0.1:9", "m", chat=chat,
                           tokenizer=tiny_tokenizer_dir, chat_template_kwargs=None)
    builder = PromptBuilder(counter, seed=1)
    start = builder.min_len()
    for n in [*range(start, start + 40), 255, 256, 511, 512, 1000, 2048]:
        prompt = builder.build(n)
        assert counter.count(prompt.text) == n
        assert prompt.counted_len == n


def test_prompts_are_unique(tiny_tokenizer_dir: Path) -> None:
    counter = make_counter("local", "http://127.0.0.1:9", "m", chat=False,
                           tokenizer=tiny_tokenizer_dir, chat_template_kwargs=None)
    builder = PromptBuilder(counter, seed=1)
    texts = [builder.build(300).text for _ in range(5)]
    assert len(set(texts)) == 5
    assert len({t[:20] for t in texts}) == 5  # the unique part is a prefix (defeats caching)
