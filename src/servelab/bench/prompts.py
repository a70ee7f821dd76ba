"""Prompts of an exact token length, as the server counts them.

Counting comes from the server's ``/tokenize`` when it has one (vLLM, SGLang), else
from the model's own tokenizer (``transformers``); :attr:`TokenCounter.source` says
which, and the result records it. Every prompt starts with a unique prefix so that
prefix caching cannot serve any part of it from an earlier request. The length is
verified again from ``usage.prompt_tokens`` after the request (see
:attr:`RequestSample.prompt_len_mismatch`).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import httpx

from servelab.errors import BenchError

_WORDS = (
    "the of and to in is was for on that with as by at from his her an it are this be or "
    "which had have not were but their one all been they has more also when who first time "
    "other into two after new would some only can may over such these its most than about "
    "world city made used then between three later many part year state during under known"
).split()

#: Short units appended after the filler words to reach an exact token count.
_PAD_UNITS = ("\n", " .", " ,", " !", " ?", " ;", ".", " 1")


Turn = tuple[str, str]
"""One earlier turn of a chat conversation: the user's message and the assistant's answer."""


def chat_messages(history: Sequence[Turn], prompt: str) -> list[dict[str, str]]:
    """The ``messages`` of a chat request: the earlier turns as alternating ``user`` /
    ``assistant`` messages, then ``prompt`` as the new user message."""
    out: list[dict[str, str]] = []
    for user, assistant in history:
        out += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    out.append({"role": "user", "content": prompt})
    return out


class TokenCounter(Protocol):
    """Counts prompt tokens the way the server will."""

    source: str
    """Human-readable: where counts come from (``server /tokenize`` or a tokenizer path)."""

    def count(self, prompt: str) -> int:
        """Tokens the server will count for ``prompt`` (including any chat template)."""
        ...


@runtime_checkable
class ConversationCounter(TokenCounter, Protocol):
    """A chat counter that also counts a whole conversation (earlier turns + new message)."""

    def count_conversation(self, history: Sequence[Turn], prompt: str) -> int:
        """Tokens of :func:`chat_messages` ``(history, prompt)`` with the generation prompt."""
        ...


class _Counting:
    """``count`` and ``count_conversation`` over one ``_count(history, prompt)``."""

    _chat: bool

    def _count(self, history: Sequence[Turn], prompt: str) -> int:
        raise NotImplementedError

    def count(self, prompt: str) -> int:
        """Tokens of ``prompt`` (including any chat template)."""
        return self._count((), prompt)

    def count_conversation(self, history: Sequence[Turn], prompt: str) -> int:
        """Tokens of a chat conversation: ``history`` then ``prompt`` (chat counters only)."""
        if not self._chat:
            raise BenchError("a conversation is counted only for the chat endpoint")
        return self._count(history, prompt)


class ServerTokenCounter(_Counting):
    """Counts with the server's ``POST /tokenize``: vLLM's schema (``{"model", "prompt"}``
    → ``{"count"}``), else llama.cpp's (``{"content", "add_special"}`` → ``{"tokens"}``),
    which has no chat form (chat prompts then need the local tokenizer)."""

    def __init__(self, base_url: str, model: str, *, chat: bool = False,
                 chat_template_kwargs: dict[str, Any] | None = None,
                 api_key: str | None = None, timeout_s: float = 60.0) -> None:
        self.source = "server /tokenize"
        self._url = base_url.rstrip("/").removesuffix("/v1") + "/tokenize"
        self._model = model
        self._chat = chat
        self._kwargs = chat_template_kwargs
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(timeout=timeout_s, headers=headers)
        self._llamacpp = False  # set once the server turned out to speak llama.cpp's schema

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()

    def available(self) -> bool:
        """True when the server answers ``/tokenize`` with a count."""
        try:
            self.count("hello")
        except BenchError:
            return False
        return True

    def _count(self, history: Sequence[Turn], prompt: str) -> int:
        """Tokens of ``prompt`` after ``history`` according to the server."""
        body: dict[str, Any] = {"model": self._model}
        if self._chat:
            body["messages"] = chat_messages(history, prompt)
            body["add_generation_prompt"] = True
            if self._kwargs is not None:
                body["chat_template_kwargs"] = self._kwargs
        else:
            body["prompt"] = prompt
        if not self._llamacpp:
            data = self._answer(self._post(body))
            if "count" in data:
                return int(data["count"])
            tokens = data.get("tokens")
            if not isinstance(tokens, list):
                raise BenchError(f"{self._url}: unexpected /tokenize answer")
            if tokens or not prompt:
                return len(tokens)
            # llama.cpp answers vLLM's schema with no tokens (it reads only "content") and
            # has no chat form.
            if self._chat:
                raise BenchError(f"{self._url}: no chat tokenization on this server")
            self._llamacpp = True
            self.source = "server /tokenize (llama.cpp)"
        data = self._answer(self._post(self._llamacpp_body(prompt)))
        if not isinstance(data.get("tokens"), list):
            raise BenchError(f"{self._url}: unexpected /tokenize answer")
        return len(data["tokens"])

    def _answer(self, r: httpx.Response) -> dict[str, Any]:
        if r.status_code != 200:
            raise BenchError(f"{self._url}: HTTP {r.status_code}")
        try:
            data = r.json()
        except ValueError as exc:
            raise BenchError(f"{self._url}: unexpected /tokenize answer") from exc
        if not isinstance(data, dict):
            raise BenchError(f"{self._url}: unexpected /tokenize answer")
        return data


    @staticmethod
    def _llamacpp_body(prompt: str) -> dict[str, Any]:
        # llama-server tokenizes a completion prompt with its special tokens (BOS if the
        # model adds one); count the same way.
        return {"content": prompt, "add_special": True}

    def _post(self, body: dict[str, Any]) -> httpx.Response:
        try:
            return self._http.post(self._url, json=body)
        except httpx.HTTPError as exc:
            raise BenchError(f"{self._url}: {type(exc).__name__}: {exc}") from exc


class LocalTokenCounter(_Counting):
    """Counts with the model's own tokenizer files (``transformers.AutoTokenizer``)."""

    def __init__(self, tokenizer_dir: str | Path, *, chat: bool = False,
                 chat_template_kwargs: dict[str, Any] | None = None) -> None:
        try:
            from transformers import AutoTokenizer
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise BenchError("counting tokens locally needs `transformers` installed "
                             "(pip install 'servelab[synth]')") from exc
        self.source = f"tokenizer {tokenizer_dir}"
        self._chat = chat
        self._kwargs = chat_template_kwargs or {}
        try:
            self._tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        except (OSError, ValueError) as exc:
            raise BenchError(f"cannot load a tokenizer: {exc}", path=tokenizer_dir) from exc

    def _count(self, history: Sequence[Turn], prompt: str) -> int:
        """Tokens of ``prompt`` after ``history`` (special tokens added as vLLM's completions
        endpoint does; the chat template as the server applies it)."""
        if self._chat:
            ids: Any = self._tok.apply_chat_template(
                chat_messages(history, prompt), add_generation_prompt=True,
                tokenize=True, **self._kwargs)
            if hasattr(ids, "keys"):
                ids = ids["input_ids"]
            return len(ids)
        enc: Any = self._tok(prompt, add_special_tokens=True)
        return len(enc["input_ids"])


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt, the length it was built to and the counter's verdict."""

    text: str
    target_len: int
    counted_len: int


class PromptBuilder:
    """Builds prompts of exactly N tokens, each with a unique prefix.

    The filler-word count found for one prefix is reused for the next prompt and
    checked with one count; only on a miss is it searched again.
    """

    def __init__(self, counter: TokenCounter, *, seed: int = 0, run_tag: str | None = None) -> None:
        self.counter = counter
        self._rng = random.Random(seed)
        self._tag = run_tag or uuid.uuid4().hex[:8]
        self._serial = 0
        self._words_for: dict[tuple[int, int], tuple[int, str]] = {}
        self._filler = [self._rng.choice(_WORDS) for _ in range(200_000)]

    def _text(self, prefix: str, words: int) -> str:
        return prefix + " " + " ".join(self._filler[:words]) if words > 0 else prefix

    def min_len(self) -> int:
        """Tokens taken by a unique prefix alone (plus any chat template): the shortest prompt."""
        return self.counter.count(self._text(f"{self._tag}-{self._serial + 1:06d}:", 0))

    def build(self, n_tokens: int) -> Prompt:
        """A prompt of exactly ``n_tokens`` tokens; BenchError when that cannot be hit."""
        return self.extend("", n_tokens)

    def extend(self, base: str, n_tokens: int, history: Sequence[Turn] = ()) -> Prompt:
        """A prompt of exactly ``n_tokens`` tokens that starts with ``base`` verbatim.

        ``base`` is a shared system prompt or the history of a conversation: a server with
        prefix caching can serve its tokens from cache. After it come a unique tag and
        filler, so two extensions of the same base share exactly the base. With ``history``
        (earlier chat turns) the prompt is the conversation's new user message and
        ``n_tokens`` counts the whole conversation, as the chat template lays it out.
        """
        if n_tokens < 1:
            raise BenchError(f"prompt length must be >= 1, got {n_tokens}")
        count = self._counter_for(history)
        self._serial += 1
        prefix = (base + " " if base else "") + f"{self._tag}-{self._serial:06d}:"
        key = (len(base) + sum(len(u) + len(a) for u, a in history), n_tokens)
        guess = self._words_for.get(key)
        if guess is not None:
            text = self._text(prefix, guess[0]) + guess[1]
            c = count(text)
            if c == n_tokens:
                return Prompt(text, n_tokens, c)
        words, pad, c = self._search(prefix, n_tokens, count)
        self._words_for[key] = (words, pad)
        return Prompt(self._text(prefix, words) + pad, n_tokens, c)

    def conversation_len(self, history: Sequence[Turn]) -> int:
        """Tokens of ``history`` followed by an empty new user message (template included)."""
        return self._counter_for(history)("")

    def _counter_for(self, history: Sequence[Turn]) -> Callable[[str], int]:
        """``count(text)`` of a new message after ``history`` (the plain count without)."""
        if not history:
            return self.counter.count
        counter = self.counter
        if not isinstance(counter, ConversationCounter):
            raise BenchError(f"{counter.source} cannot count a chat conversation")
        return lambda text: counter.count_conversation(history, text)

    def fit(self, text: str, n_tokens: int | None) -> Prompt:
        """A dataset text behind a unique tag: cut (whole words) and filled to exactly
        ``n_tokens``, or at its natural length when ``n_tokens`` is None."""
        self._serial += 1
        tagged = f"{self._tag}-{self._serial:06d}: {text}"
        if n_tokens is None:
            c = self.counter.count(tagged)
            return Prompt(tagged, c, c)
        head, _, body = tagged.partition(" ")
        words = body.split()
        lo, hi = 0, len(words)  # the longest word prefix that stays within n_tokens
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.counter.count(" ".join([head, *words[:mid]])) <= n_tokens:
                lo = mid
            else:
                hi = mid - 1
        base = " ".join([head, *words[:lo]])
        n_words, pad, c = self._search(base, n_tokens, self.counter.count)
        return Prompt(self._text(base, n_words) + pad, n_tokens, c)

    @staticmethod
    def _pad(text: str, have: int, n: int, count: Callable[[str], int]) -> str | None:
        """A suffix of short units that brings ``text`` (``have`` tokens) to exactly ``n``.

        Filler words can be several tokens each (small vocabularies), so the word count
        alone may step over ``n``; the units close that gap one token at a time.
        """
        for unit in _PAD_UNITS:
            pad, c = "", have
            for _ in range(n - have + 2):
                pad += unit
                c = count(text + pad)
                if c == n:
                    return pad
                if c > n:
                    break
        return None

    def _search(self, prefix: str, n: int,
                count: Callable[[str], int]) -> tuple[int, str, int]:
        base = count(self._text(prefix, 0))
        if base > n:
            raise BenchError(f"cannot build a {n}-token prompt: the unique prefix and template "
                             f"alone take {base} tokens")
        if base == n:
            return 0, "", base
        lo, hi = 0, None  # lo: words known to give < n tokens
        lo_count = base
        w = n - base
        for _ in range(40):
            w = min(max(w, 1), len(self._filler))
            c = count(self._text(prefix, w))
            if c == n:
                return w, "", c
            if c < n:
                if w >= lo:
                    lo, lo_count = w, c
                nxt = w + (n - c)
            else:
                hi = w if hi is None else min(hi, w)
                nxt = w - (c - n)
            if hi is not None and not (lo < nxt < hi):
                nxt = (lo + hi) // 2
            if hi is not None and hi - lo <= 1:
                break
            w = nxt
        pad = self._pad(self._text(prefix, lo), lo_count, n, count)
        if pad is not None:
            return lo, pad, n
        raise BenchError(f"cannot build a prompt of exactly {n} tokens with "
                         f"{self.counter.source} (closest word counts {lo}..{hi})")


def make_counter(kind: Literal["auto", "server", "local"], base_url: str, model: str, *,
                 chat: bool, tokenizer: str | Path | None,
                 chat_template_kwargs: dict[str, Any] | None, api_key: str | None = None
                 ) -> TokenCounter:
    """Pick the counter: the server's ``/tokenize`` when present, else the local tokenizer."""
    if kind in ("auto", "server"):
        sc = ServerTokenCounter(base_url, model, chat=chat,
                                chat_template_kwargs=chat_template_kwargs, api_key=api_key)
        if sc.available():
            return sc
        sc.close()
        if kind == "server":
            raise BenchError(f"{base_url}: the server has no usable /tokenize")
    if tokenizer is None:
        raise BenchError(f"{base_url}: no /tokenize on the server; pass --tokenizer DIR "
                         "(the model's tokenizer files) to build exact-length prompts")
    return LocalTokenCounter(tokenizer, chat=chat, chat_template_kwargs=chat_template_kwargs)
