"""Looking inside a ViT (paper Section 4.5): embedding filters, position-embedding similarity, mean attention
distance and attention rollout."""
from ..lazy import lazy_exports

__all__ = ["FIGURES", "attention_maps", "filter_components", "inspect_backbone", "mean_attention_distance",
           "patch_distances", "position_embeddings", "position_similarity", "recording", "rollout",
           "row_column_structure", "uniform_distance"]
__getattr__, __dir__ = lazy_exports(__name__, {
    **dict.fromkeys(["attention_maps", "mean_attention_distance", "patch_distances", "recording", "rollout",
                     "uniform_distance"], ".attention"),
    **dict.fromkeys(["filter_components", "position_embeddings", "position_similarity", "row_column_structure"],
                    ".embeddings"),
    **dict.fromkeys(["FIGURES", "inspect_backbone"], ".inspection")})
