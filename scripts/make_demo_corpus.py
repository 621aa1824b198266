"""Derive the bundled demo corpus from SQuAD v1.1 dev (CC BY-SA 4.0) in BEIR layout.

Usage: python scripts/make_demo_corpus.py ../shared/datasets/squad-v1.1-dev

Takes the first 12 paragraphs of each of the articles that have questions (0-23) and the first two questions of
each paragraph, and writes them with their license and attribution to platform/ferret/core/demo/squad_demo/, with
a few-shot task (task.yaml) whose 8 examples are other questions of the same paragraphs (never evaluated ones).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import yaml

PARAGRAPHS_PER_ARTICLE = 12
QUESTIONS_PER_PARAGRAPH = 2
EXAMPLES = 8
OUT = Path(__file__).resolve().parents[1] / "platform/ferret/core/demo/squad_demo"


def main(source: Path) -> None:
    by_article: dict[str, list[dict]] = defaultdict(list)
    for line in (source / "corpus.jsonl").open():
        doc = json.loads(line)
        by_article[doc["_id"].split("-p")[0]].append(doc)
    questions: dict[str, list[dict]] = defaultdict(list)
    for line in (source / "queries.jsonl").open():
        query = json.loads(line)
        questions[query["metadata"]["gold_paragraph"]].append(query)
    docs: list[dict[str, str]] = []
    queries: list[dict[str, str]] = []
    examples: list[dict[str, str]] = []
    for article in sorted(by_article):
        kept = [d for d in by_article[article] if questions.get(d["_id"])][:PARAGRAPHS_PER_ARTICLE]
        for doc in kept:
            docs.append({"_id": doc["_id"], "title": doc["title"], "text": doc["text"]})
            for query in questions[doc["_id"]][:QUESTIONS_PER_PARAGRAPH]:
                queries.append({"_id": query["_id"], "text": query["text"], "doc": doc["_id"]})
            # Few-shot examples for the demo task: a later question, never one of the evaluated ones.
            extra = questions[doc["_id"]][QUESTIONS_PER_PARAGRAPH:]
            if extra and len(examples) < EXAMPLES and len(docs) % 36 == 1:
                examples.append({"query": extra[0]["text"].strip(), "document": doc["_id"]})
    (OUT / "qrels").mkdir(parents=True, exist_ok=True)
    with (OUT / "corpus.jsonl").open("w") as handle:
        for doc in docs:
            handle.write(json.dumps(doc, ensure_ascii=False) + "\n")
    with (OUT / "queries.jsonl").open("w") as handle:
        for query in queries:
            handle.write(json.dumps({"_id": query["_id"], "text": query["text"]}, ensure_ascii=False) + "\n")
    with (OUT / "qrels" / "test.tsv").open("w") as handle:
        handle.write("query-id\tcorpus-id\tscore\n")
        for query in queries:
            handle.write(f"{query['_id']}\t{query['doc']}\t1\n")
    task = {
        "name": "demo-questions",
        "corpus": "demo",
        "description": "Find the Wikipedia paragraph that answers a trivia question.",
        "e_doc": "Paragraph",
        "e_query": "Question",
        "generation": {"queries_per_doc": 1, "max_tokens": 32, "seed": 13},
        "examples": examples,
    }
    (OUT / "task.yaml").write_text(yaml.safe_dump(task, sort_keys=False, allow_unicode=True))
    print(f"{len(docs)} paragraphs, {len(queries)} questions, {len(examples)} task examples -> {OUT}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
