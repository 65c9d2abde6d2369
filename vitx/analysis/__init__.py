"""Looking inside a ViT (paper Section 4.5): embedding filters, position-embedding similarity, mean attention
distance and attention rollout."""
from .attention import (attention_maps, mean_attention_distance, patch_distances, recording, rollout,
                        uniform_distance)
from .embeddings import filter_components, position_embeddings, position_similarity, row_column_structure
from .inspection import FIGURES, inspect_backbone

__all__ = ["FIGURES", "attention_maps", "filter_components", "inspect_backbone", "mean_attention_distance",
           "patch_distances", "position_embeddings", "position_similarity", "recording", "rollout",
           "row_column_structure", "uniform_distance"]
