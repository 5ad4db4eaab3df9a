"""The sample entry store the notebooks open when they are given no store."""

from __future__ import annotations

from memwork.samples import process_temp_folder


def sample_store(
    n: int = 400,
    *,
    seed: int = 11,
    scopes: tuple[str, ...] = ("alice", "bob", "ops"),
    embedder: str = "minilm",
) -> str:
    """A small generated SQLite entry store in a temporary folder that lives as long as this process
    (:func:`memwork.samples.process_temp_folder`); returns its URL.

    Embedded with the real model by default, so the duplicate review shows semantic similarity.
    """
    from memwork.embed import load_embedder
    from memwork.samples.entries import generate_entries
    from memwork.stores import DEFAULT_DIMENSION, open_store

    path = process_temp_folder("memwork-store-") / "store.db"
    spec = f"sqlite:///{path}"
    model = load_embedder(embedder)
    entries = generate_entries(n, scopes=scopes, seed=seed, embedder=model)
    dimension = model.dimension if model is not None else DEFAULT_DIMENSION  # "none": hash-384 vectors
    with open_store(spec, create=True, dimension=dimension) as store:
        store.put_many(entries)
    return spec
