"""One prompt and one generation for one document, exactly as a generation run would make them: what the admin
shows before an admin launches a pipeline (Promptagator, Dai et al. 2022, section 3.1: the few-shot prompt).

Example:
    >>> preview = preview_prompt(session, task, document)
    >>> print(preview.prompt)          # the examples, then the document and "{e_query}:"
    >>> try_generation(session, task, document, build_backend(settings)).text
    'how do glaciers carve valleys'
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from ferret.core.db.models import Document, RetrievalTask
from ferret.core.llm.base import LLMBackend
from ferret.core.synth.generation import STOP, Judgement, judge_completion, task_prompt_builder
from ferret.core.synth.prompt import PromptBudget, document_text
from ferret.core.synth.query_text import normalize
from ferret.core.synth.task_spec import task_generation_settings


@dataclass(frozen=True)
class PromptPreview:
    prompt: str
    document: str
    """The document as the prompt reads it (title and body)."""


def preview_prompt(session: Session, task: RetrievalTask, document: Document) -> PromptPreview:
    """The exact prompt a generation run would send for ``document`` (same budget, same example cut)."""
    settings = task_generation_settings(task)
    builder = task_prompt_builder(
        session, task, PromptBudget(max_new_tokens=settings.max_tokens), example_chars=settings.example_chars
    )
    text = document_text(document.title, document.body)
    return PromptPreview(builder.build(text), text)


def try_generation(session: Session, task: RetrievalTask, document: Document, backend: LLMBackend) -> Judgement:
    """One sampled query for ``document`` with the task's settings, judged like a run's (``failure`` says why a
    generation would count as failed). Nothing is stored."""
    settings = task_generation_settings(task)
    builder = task_prompt_builder(
        session, task, PromptBudget(max_new_tokens=settings.max_tokens), example_chars=settings.example_chars
    )
    text = document_text(document.title, document.body)
    completion = backend.complete(
        [builder.build(text)],
        n=1,
        temperature=settings.temperature,
        max_tokens=settings.max_tokens,
        stop=STOP,
        seed=settings.seed + document.id,
    )[0][0]
    return judge_completion(
        completion,
        document=text,
        example_queries={normalize(query) for _, query in builder.examples},
        e_doc=task.e_doc,
        e_query=task.e_query,
    )
