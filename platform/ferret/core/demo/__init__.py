"""The bundled demo corpus: SQuAD v1.1 dev paragraphs and questions (CC BY-SA 4.0, see squad_demo/)."""

from pathlib import Path

DEMO_DATASET = Path(__file__).parent / "squad_demo"
DEMO_CORPUS = "demo"
DEMO_TASK = DEMO_DATASET / "task.yaml"
