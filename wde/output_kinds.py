"""The output kinds an embedding model can hand back per text: the one table.

A kind is one ``OutputKind`` entry: how a caller asks for it and the HTTP routes that serve it. The head
that makes it is its entry in ``wde.layers.pooler.poolers.OUTPUT_HEADS`` (kept there so that this module
stays free of torch; a test checks that both tables name the same kinds). Adding a kind is one entry here
plus its head builder there.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OutputKind:
    name: str
    description: str  # what one text's output is
    routes: tuple[str, ...]  # the HTTP routes that return it

    @property
    def how_to_ask(self) -> str:
        """For an error message: where a caller gets this kind."""
        return f"output='{self.name}'; POST {', '.join(self.routes)}"


OUTPUT_KINDS: dict[str, OutputKind] = {
    kind.name: kind
    for kind in (
        OutputKind(
            "dense",
            "one pooled vector per text",
            ("/embed", "/v1/embeddings"),
        ),
        OutputKind(
            "sparse",
            "vocabulary weights per text: (token id, weight) pairs (SPLADE, BGE-M3 lexical weights)",
            ("/embed_sparse", "/v1/embeddings"),
        ),
        OutputKind(
            "multi_vector",
            "one vector per token (ColBERT late interaction, BGE-M3 ColBERT vectors)",
            ("/embed_all", "/v1/embeddings"),
        ),
    )
}


def routes_of(kinds: tuple[str, ...]) -> set[str]:
    """The HTTP routes a model serving ``kinds`` answers."""
    return {route for kind in kinds for route in OUTPUT_KINDS[kind].routes}
