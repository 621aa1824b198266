"""Promptagator prompts, character for character: few-shot, zero-shot, truncation to the context budget."""

from __future__ import annotations

from sqlalchemy.orm import Session

from ferret.core.db.models import Corpus
from ferret.core.synth.generation import task_prompt_builder
from ferret.core.synth.prompt import PromptBudget, PromptBuilder, document_text, truncate
from ferret.core.synth.task_spec import ExampleSpec, TaskSpec, create_task


def test_few_shot_prompt_is_exactly_the_paper_shape() -> None:
    builder = PromptBuilder(
        "Fact",
        "Question",
        [("Paris. Paris is the capital.", "capital of France?"), ("Tea. Tea has\ncaffeine.", "does tea have caffeine")],
    )

    prompt = builder.build("Coffee. Coffee is   brewed.")

    assert prompt == (
        "Fact: Paris. Paris is the capital.\n"
        "Question: capital of France?\n"
        "Fact: Tea. Tea has caffeine.\n"
        "Question: does tea have caffeine\n"
        "Fact: Coffee. Coffee is brewed.\n"
        "Question:"
    )


def test_zero_shot_prompt_is_the_paper_shape_with_the_query_line_opened() -> None:
    builder = PromptBuilder("Document", "Question", [("ignored", "ignored")], zero_shot=True)
    assert (
        builder.build("Coffee. Coffee is brewed.")
        == "Coffee. Coffee is brewed. Read the passage and generate a query.\nQuestion:"
    )
    assert builder.prefix == ""


def test_the_prefix_is_the_same_for_every_document() -> None:
    builder = PromptBuilder("Document", "Query", [("a b c", "q1"), ("d e f", "q2")])
    first, second = builder.build_many(["one document", "another document entirely"])
    assert first.startswith(builder.prefix) and second.startswith(builder.prefix)
    assert builder.prefix == "Document: a b c\nQuery: q1\nDocument: d e f\nQuery: q2\n"


def test_documents_are_truncated_so_eight_examples_and_the_new_one_fit() -> None:
    long_document = " ".join(f"word{i}" for i in range(3000))
    budget = PromptBudget()
    builder = PromptBuilder(
        "Document", "Query", [(long_document, f"query number {i}") for i in range(8)], budget=budget
    )

    prompt = builder.build(long_document)

    assert len(prompt) <= budget.prompt_chars
    assert len(prompt) > 0.95 * budget.prompt_chars  # the budget is used, not wasted
    lines = prompt.splitlines()
    assert len(lines) == 18
    assert all(line.startswith(("Document: word0 word1", "Query:")) for line in lines)
    assert lines[-2] == lines[0]  # every document gets the same share


def test_document_text_and_truncate() -> None:
    assert document_text("Paris", "Capital\nof France.") == "Paris. Capital of France."
    assert document_text("What is tea?", "A drink.") == "What is tea? A drink."
    assert document_text("", "Only text.") == "Only text."
    assert document_text("Only title", "") == "Only title"
    assert truncate("alpha beta gamma", 12) == "alpha beta"
    assert truncate("alpha beta gamma", 100) == "alpha beta gamma"
    assert truncate("supercalifragilistic", 5) == "super"


def test_task_prompt_reads_example_documents_from_the_corpus(session: Session, corpus: Corpus) -> None:
    task = create_task(
        session,
        TaskSpec(
            name="facts",
            corpus="facts",
            e_doc="Fact",
            e_query="Question",
            examples=[
                ExampleSpec(query="What is the capital of France?", document="d1"),
                ExampleSpec(query="Why is the sky blue?", document_text="Air scatters blue light."),
            ],
        ),
    )

    prompt = task_prompt_builder(session, task).build(document_text("Tea", "Tea has caffeine."))

    assert prompt == (
        "Fact: Paris. Paris is the capital and largest city of France, on the river Seine.\n"
        "Question: What is the capital of France?\n"
        "Fact: Air scatters blue light.\n"
        "Question: Why is the sky blue?\n"
        "Fact: Tea. Tea has caffeine.\n"
        "Question:"
    )


def test_short_examples_leave_the_new_document_the_rest_of_the_context() -> None:
    long_document = "word " * 2_000
    examples = [(long_document, f"query {i}") for i in range(8)]
    even = PromptBuilder("Document", "Query", examples)
    short = PromptBuilder("Document", "Query", examples, example_chars=100)
    assert all(len(document) <= 100 for document, _ in short.examples)
    assert short.document_chars > 5 * even.document_chars
    prompt = short.build(long_document)
    assert len(prompt) <= short.budget.prompt_chars
    assert prompt.startswith(short.prefix) and prompt.endswith("\nQuery:")
