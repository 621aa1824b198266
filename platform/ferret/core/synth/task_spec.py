"""A retrieval task as a YAML file: import, export and validation (Promptagator, Dai et al. 2022, section 3).

A task is a short description, the two words the prompt puts before documents and queries, and 2-8
(query, document) examples, or none when zero-shot. An example's document is a corpus document named by its
external id (``document``, plus ``source`` when several sources share the id) or given as ``document_text``.
Everything is validated before anything is written, so a bad file leaves the database as it was.

Example:
    >>> spec = load_task_spec(Path("scifact-task.yaml"))
    >>> task = create_task(session, spec)
    >>> Path("copy.yaml").write_text(dump_task_spec(task_to_spec(task)))

    name: scifact-claims
    corpus: scifact
    description: Find the abstract that supports or refutes a scientific claim.
    e_doc: Article
    e_query: Claim
    examples:
      - query: 0-dimensional biomaterials show inductive properties.
        document: "31715818"
      - query: A deficiency of vitamin B12 increases blood levels of homocysteine.
        document_text: Vitamin B12 deficiency raises homocysteine ...
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy.orm import Session

from ferret.core.acl import may_read
from ferret.core.db.corpus import get_corpus
from ferret.core.db.models import RetrievalTask, TaskExample
from ferret.core.db.task import (
    add_task,
    documents_by_external_ids,
    ensure_task_name_free,
    similar_external_ids,
    validate_task_name,
)
from ferret.core.errors import InvalidInputError

MIN_EXAMPLES = 2
MAX_EXAMPLES = 8  # "Few-shot Dense Retrieval From 8 Examples"
MAX_QUERIES_PER_DOC = 8


class GenerationSettings(BaseModel):
    """How queries are sampled for each document (Promptagator, section 3.1: T=0.7, up to 8 per document)."""

    model_config = ConfigDict(extra="forbid")

    queries_per_doc: int = Field(default=8, ge=1, le=MAX_QUERIES_PER_DOC)
    max_documents: int | None = Field(default=None, ge=1, description="Cap on documents (a seeded sample).")
    temperature: float = Field(default=0.7, ge=0.0, le=2.0)
    max_tokens: int = Field(default=48, ge=4, le=512)
    seed: int = 0
    example_chars: int | None = Field(
        default=250,
        ge=50,
        description="Cut the examples' documents in the prompt to this many characters (the new document gets the "
        "rest): small generators copy long examples instead of reading the new document. None: whole examples.",
    )


class ExampleSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str
    document: str | None = Field(default=None, description="External id of a document of the corpus.")
    source: str | None = Field(default=None, description="Source of that document, when several share the id.")
    document_text: str | None = Field(default=None, description="The document itself, when not in the corpus.")


class TaskSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    corpus: str
    description: str = ""
    e_doc: str = "Document"
    e_query: str = "Query"
    zero_shot: bool = False
    generation: GenerationSettings = Field(default_factory=GenerationSettings)
    examples: list[ExampleSpec] = Field(default_factory=list)


def _location(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for part in loc:
        parts.append(f"[{part + 1}]" if isinstance(part, int) else ("." if parts else "") + part)
    return "".join(parts) or "the task"


def parse_task_spec(data: Any, where: str = "The task") -> TaskSpec:
    """A ``TaskSpec`` from parsed YAML/JSON; a shape error becomes one sentence naming the field."""
    if not isinstance(data, dict):
        raise InvalidInputError(f"{where} must be a mapping with at least 'name', 'corpus' and 'examples'.")
    try:
        return TaskSpec.model_validate(data)
    except ValidationError as error:
        # Every problem at once (issue 11, item 13): a file with two misspelt keys should take one fix, not two.
        problems = [f"'{_location(e['loc'])}': {str(e['msg']).rstrip('.')}" for e in error.errors()]
        if len(problems) == 1:
            raise InvalidInputError(f"{where} is not valid at {problems[0]}.") from None
        raise InvalidInputError(f"{where} has {len(problems)} problems: at {'; at '.join(problems)}.") from None


PLACEHOLDER_QUERY = "A question a user would type, answered by this document?"
"""The template's example query: a task imported with it unchanged would teach the generator this sentence."""

TEMPLATE = """\
# A retrieval task for `ferret task import` (Promptagator, Dai et al. 2022): what the search is for, in a sentence,
# and 2-8 real (query, document) pairs. `ferret task show NAME` checks and prints it once imported.
name: {name}                 # lowercase letters, digits, '.', '-' or '_'
corpus: {corpus}
description: Find the document that answers an employee's question.   # one sentence: who searches for what
e_doc: Document              # the word the prompt puts before a document (e.g. Article, Policy, Abstract)
e_query: Query               # ... and before a query (e.g. Question, Claim)
zero_shot: false             # true: no examples (then leave 'examples' out)
generation:
  queries_per_doc: 8         # queries sampled per document (1-8)
  max_documents: null        # null: every document; a number: a seeded sample
  temperature: 0.7
  seed: 0
examples:                    # 2-8; 'document' is a document id of the corpus (`ferret search` shows them)
{examples}"""


def task_template(corpus: str, document_ids: list[str]) -> str:
    """A commented task file to fill in, with real document ids of ``corpus`` where it has some."""
    ids = [*document_ids[:2], "a-document-id", "another-document-id"][:2]
    examples = "".join(f"  - query: {PLACEHOLDER_QUERY}\n    document: {doc_id!r}\n" for doc_id in ids)
    examples += "  # - query: ...\n  #   document_text: the document itself, when it is not in the corpus\n"
    return TEMPLATE.format(name=f"{corpus}-task"[:64], corpus=corpus, examples=examples)


def load_task_spec(path: Path) -> TaskSpec:
    if not path.is_file():
        raise InvalidInputError(f"Task file {path} does not exist.")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f" near line {mark.line + 1}" if mark is not None else ""
        raise InvalidInputError(
            f"Task file {path} is not valid YAML{line}; check its indentation and quoting."
        ) from None
    return parse_task_spec(data, f"Task file {path}")


def dump_task_spec(spec: TaskSpec) -> str:
    data = spec.model_dump(mode="json", exclude_none=True)
    # A null generation setting means something (no cap, whole examples): dropped, it would import as the default.
    data["generation"] = spec.generation.model_dump(mode="json")
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120)


def _check_label(label: str, field: str) -> None:
    if not label.strip() or "\n" in label or ":" in label or len(label) > 64:
        raise InvalidInputError(
            f"{field} {label!r} must be a short one-line description without ':' (e.g. 'Document', 'Query')."
        )


def create_task(session: Session, spec: TaskSpec, *, readable_by: Collection[str] | None = None) -> RetrievalTask:
    """Validate ``spec`` completely against the database, then insert the task and its examples.

    ``readable_by``: the ACL groups of the caller (an API key); an example's document shared with none of them is
    "not in the corpus", as a search or a document fetch answers, so the answer tells nothing of what exists."""
    validate_task_name(spec.name)
    ensure_task_name_free(session, spec.name)
    return add_task(session, _build_task(session, spec, readable_by))


def update_task(session: Session, task: RetrievalTask, spec: TaskSpec) -> RetrievalTask:
    """Replace a task's description, prompt words, examples and generation settings with ``spec``'s, validated
    exactly as ``create_task`` validates a new one. The name and the corpus stay: generation runs refer to them."""
    if spec.name != task.name or spec.corpus != task.corpus.name:
        raise InvalidInputError(
            f"A task's name and corpus cannot change ({task.name!r} on {task.corpus.name!r}); "
            "export it and import it under a new name instead."
        )
    edited = _build_task(session, spec)
    examples = list(edited.examples)
    edited.examples = []  # detached first: moving them must not cascade the scratch task into the session
    task.description, task.e_doc, task.e_query = edited.description, edited.e_doc, edited.e_query
    task.zero_shot, task.generation = edited.zero_shot, edited.generation
    task.examples.clear()
    session.flush()  # the old examples go before the new ones take their positions
    task.examples.extend(examples)
    session.flush()
    return task


def _build_task(session: Session, spec: TaskSpec, readable_by: Collection[str] | None = None) -> RetrievalTask:
    """The task ``spec`` describes, every field checked against the database, not yet added to the session."""
    corpus = get_corpus(session, spec.corpus)
    _check_label(spec.e_doc, "The document description (e_doc)")
    _check_label(spec.e_query, "The query description (e_query)")
    count = len(spec.examples)
    if spec.zero_shot and count:
        raise InvalidInputError(
            f"Task {spec.name!r} is zero-shot but has {count} examples; remove them or set zero_shot to false."
        )
    if not spec.zero_shot and not MIN_EXAMPLES <= count <= MAX_EXAMPLES:
        raise InvalidInputError(
            f"Task {spec.name!r} has {count} example{'s' * (count != 1)}; a few-shot task needs "
            f"{MIN_EXAMPLES} to {MAX_EXAMPLES} (or make it zero-shot)."
        )
    found = documents_by_external_ids(session, corpus, [e.document for e in spec.examples if e.document is not None])
    examples: list[TaskExample] = []
    for position, example in enumerate(spec.examples, start=1):
        query = " ".join(example.query.split())
        if not query:
            raise InvalidInputError(f"Example {position} has an empty query; write the query it should teach.")
        if query == PLACEHOLDER_QUERY:
            raise InvalidInputError(
                f"Example {position} still has the template's query; replace it with a query a user would type for "
                "its document."
            )
        if (example.document is None) == (example.document_text is None):
            raise InvalidInputError(
                f"Example {position} needs exactly one of 'document' (an external id in corpus {corpus.name!r}) "
                "or 'document_text'."
            )
        if example.document_text is not None:
            if not example.document_text.strip():
                raise InvalidInputError(f"Example {position} has an empty document_text.")
            examples.append(TaskExample(position=position, query=query, document_text=example.document_text.strip()))
            continue
        assert example.document is not None
        candidates = [
            document
            for document in found.get(example.document, [])
            if (example.source is None or document.source == example.source)
            and (readable_by is None or may_read(readable_by, document.acl_groups))
        ]
        where = f" in source {example.source!r}" if example.source is not None else ""
        if not candidates:
            close = similar_external_ids(session, corpus, example.document)
            if readable_by is not None:  # a suggestion must not name a document the caller may not read either
                near = documents_by_external_ids(session, corpus, close)
                close = [i for i in close if any(may_read(readable_by, d.acl_groups) for d in near.get(i, []))]
            hint = f"did you mean {close[0]!r}? Or" if close else "check the external id or"
            raise InvalidInputError(
                f"Example {position}'s document {example.document!r} is not in corpus {corpus.name!r}{where}; "
                f"{hint} give the text as 'document_text'."
            )
        if len(candidates) > 1:
            sources = ", ".join(document.source for document in candidates)
            raise InvalidInputError(
                f"Example {position}'s document {example.document!r} is in several sources of corpus "
                f"{corpus.name!r} ({sources}); add 'source' to the example."
            )
        document = candidates[0]
        examples.append(
            TaskExample(
                position=position,
                query=query,
                document_id=document.id,
                source=document.source,
                external_id=document.external_id,
            )
        )
    return RetrievalTask(
        name=spec.name,
        corpus_id=corpus.id,
        description=spec.description.strip(),
        e_doc=spec.e_doc.strip(),
        e_query=spec.e_query.strip(),
        zero_shot=spec.zero_shot,
        generation=spec.generation.model_dump(mode="json"),
        examples=examples,
    )


def task_to_spec(task: RetrievalTask) -> TaskSpec:
    """The YAML form of a stored task; examples name their document by external id and source."""
    examples = [
        ExampleSpec(query=example.query, document_text=example.document_text)
        if example.document_text is not None
        else ExampleSpec(query=example.query, document=example.external_id, source=example.source)
        for example in task.examples
    ]
    return TaskSpec(
        name=task.name,
        corpus=task.corpus.name,
        description=task.description,
        e_doc=task.e_doc,
        e_query=task.e_query,
        zero_shot=task.zero_shot,
        generation=task_generation_settings(task),
        examples=examples,
    )


def task_generation_settings(task: RetrievalTask) -> GenerationSettings:
    """The task's stored settings; fields added since it was written take their defaults."""
    return GenerationSettings.model_validate(task.generation or {})
