"""Writing our embedded weights in the formats peer frameworks load (no download)."""
