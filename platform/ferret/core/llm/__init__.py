"""Language-model backends behind one interface: an OpenAI-compatible endpoint, or an embedded local model."""
