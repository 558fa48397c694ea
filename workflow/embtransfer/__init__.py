"""Cross-lingual embedding transfer: SALT, its baselines, and the workflow around them."""
