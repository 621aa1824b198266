"""Promptagator (Dai et al. 2022): tasks, few-shot prompts, synthetic query generation and filtering."""
