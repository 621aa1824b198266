"""Fine-tuning retrievers: dual encoders on synthetic pairs (Promptagator), and the promotion guard."""
