"""End-to-end training pipelines that chain generation, filtering, training, indexing and promotion."""
