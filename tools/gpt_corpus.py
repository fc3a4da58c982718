"""A synthetic corpus with structure a small GPT can learn, generated from a seed (no downloads).

Tokens spell "words" (random strings of 2-6 tokens from a lexicon); words follow a first-order Markov
chain with a few successors each, so the next token is nearly certain inside a word and a choice among
a handful at a word boundary. Each sequence also repeats one earlier span of itself, which only attention
can predict (an induction head's job): the backward through attention matters to the loss.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CorpusConfig:
    vocab: int = 256
    words: int = 1024            # lexicon size
    successors: int = 6          # next words a word may be followed by
    repeat: tuple[int, int] = (32, 192)   # length range of the span each sequence repeats
    seed: int = 1234             # the corpus's own seed: every run sees the same sequences


def make_sequences(config: CorpusConfig, count: int, length: int) -> np.ndarray:
    """`count` sequences of `length` tokens (int64 [count, length]), the same for the same config."""
    if length < 8 or config.vocab < 8:
        raise ValueError(f"sequences of {length} tokens over a vocabulary of {config.vocab} are too small to "
                         "hold the corpus's structure: use a length and vocab of at least 8")
    rng = np.random.default_rng(config.seed)
    lengths = rng.integers(2, 7, size=config.words)
    spelling = rng.integers(1, config.vocab, size=(config.words, 6))    # token 0 is never used
    successor = rng.integers(0, config.words, size=(config.words, config.successors))
    odds = np.cumsum(rng.dirichlet(np.full(config.successors, 0.5), size=config.words), axis=1)

    # One word chain per sequence, vectorised over sequences; 2 tokens per word at worst fill `length`.
    chain_words = length // 2 + 1
    words = np.empty((count, chain_words), dtype=np.int64)
    words[:, 0] = rng.integers(0, config.words, size=count)
    for i in range(1, chain_words):
        pick = (rng.random(count)[:, None] > odds[words[:, i - 1]]).sum(axis=1)
        words[:, i] = successor[words[:, i - 1], np.minimum(pick, config.successors - 1)]
    spelled = spelling[words]                                           # [count, chain_words, 6]
    keep = np.arange(6) < lengths[words][..., None]
    tokens = np.stack([row[mask][:length] for row, mask in zip(spelled, keep)])

    # Repeat a span: tokens [a, a + n) copied to [b, b + n), b after the span ends.
    low, high = (min(r, length // 4) for r in config.repeat)
    for row in tokens:
        n = int(rng.integers(low, high + 1))
        a = int(rng.integers(0, length - 2 * n + 1))
        b = int(rng.integers(a + n, length - n + 1))
        row[b:b + n] = row[a:a + n]
    return tokens
