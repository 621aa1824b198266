"""Tasks: create or edit a task whose 2–8 examples are picked by searching the corpus, preview the exact prompt for
a sample document, try one generation live, import and export the task YAML."""

from __future__ import annotations

from typing import Any

import streamlit as st
import yaml

from ferret.core.db.corpus import list_corpora
from ferret.core.db.document import list_documents
from ferret.core.db.task import get_task, list_tasks
from ferret.core.errors import InvalidInputError
from ferret.core.llm.factory import build_backend
from ferret.core.search.snippets import snippet_window
from ferret.core.synth.preview import preview_prompt, try_generation
from ferret.core.synth.task_spec import (
    ExampleSpec,
    GenerationSettings,
    TaskSpec,
    create_task,
    dump_task_spec,
    parse_task_spec,
    task_to_spec,
    update_task,
)
from ferret.ui.admin.common import attempt, escape_markdown, notify, page_context, show_notice

NEW = "New task"
EXAMPLES_KEY = "task_examples"  # the draft's examples: dicts with document (external id), source, title, query
EDITING_KEY = "task_editing"
EXAMPLES_CORPUS_KEY = "task_examples_corpus"  # the corpus the draft's examples were picked from
NEXT_CHOICE_KEY = "task_next_choice"  # the task to show after a rerun (a widget cannot be set once it exists)


def _load_draft(choice: str, task_spec: TaskSpec | None) -> None:
    """Reset the draft when the admin switches between tasks."""
    if st.session_state.get(EDITING_KEY) == choice:
        return
    st.session_state[EDITING_KEY] = choice
    st.session_state[EXAMPLES_CORPUS_KEY] = task_spec.corpus if task_spec else None
    examples: list[dict[str, Any]] = [
        {
            "document": spec.document,
            "source": spec.source,
            "title": "",
            "text": spec.document_text,
            "query": spec.query,
        }
        for spec in (task_spec.examples if task_spec else [])
    ]
    _store_examples(examples)


def _store_examples(examples: list[dict[str, Any]]) -> None:
    """The draft's examples, and each query box's value at its position (the boxes are keyed by position)."""
    st.session_state[EXAMPLES_KEY] = examples
    for position, example in enumerate(examples):
        st.session_state[f"example-query-{position}"] = example["query"]


def _follow_corpus(corpus: str) -> None:
    """A new task's examples are documents of its corpus: when the admin picks another corpus, the examples picked
    from the first one go (an id of one corpus may name another document, or none, in the other)."""
    picked_from = st.session_state.get(EXAMPLES_CORPUS_KEY)
    st.session_state[EXAMPLES_CORPUS_KEY] = corpus
    if picked_from is None or picked_from == corpus:
        return
    _sync_queries()
    examples: list[dict[str, Any]] = st.session_state[EXAMPLES_KEY]
    kept = [example for example in examples if example["document"] is None]  # given as text: no corpus
    if len(kept) == len(examples):
        return
    _store_examples(kept)
    dropped = len(examples) - len(kept)
    st.info(
        f"The {dropped} example{'s' if dropped != 1 else ''} picked from corpus {picked_from} "
        f"{'were' if dropped != 1 else 'was'} removed: a task's examples are documents of its own corpus, {corpus}."
    )


def _example_finder(context: Any, corpus_name: str) -> None:
    """Search the corpus and add documents as examples."""

    examples: list[dict[str, Any]] = st.session_state[EXAMPLES_KEY]
    query = st.text_input("Find example documents in the corpus", key="example-search")
    if not query.strip():
        return
    hits = attempt(lambda: context.searcher.search(corpus_name, query, k=5))
    for hit in hits or []:
        chosen = any(e["document"] == hit.external_id and e["source"] == hit.source for e in examples)
        left, right = st.columns([5, 1])
        left.markdown(f"**{escape_markdown(hit.title or hit.external_id)}** · `{hit.external_id}`")
        left.caption(escape_markdown(snippet_window(hit.text, query, width=200)))
        right.button(
            "Added" if chosen else "Add",
            key=f"add-{hit.source}-{hit.external_id}",
            disabled=chosen,
            on_click=_add_example,
            args=({"document": hit.external_id, "source": hit.source, "title": hit.title, "text": None, "query": ""},),
        )


def _add_example(example: dict[str, Any]) -> None:
    """Button callback (runs before the widgets exist, so their values can be set)."""
    _sync_queries()
    examples = st.session_state[EXAMPLES_KEY]
    examples.append(example)
    st.session_state[f"example-query-{len(examples) - 1}"] = ""


def _remove_example(index: int) -> None:
    _sync_queries()
    examples = st.session_state[EXAMPLES_KEY]
    _store_examples(examples[:index] + examples[index + 1 :])


def _sync_queries() -> None:
    for index, example in enumerate(st.session_state[EXAMPLES_KEY]):
        example["query"] = st.session_state.get(f"example-query-{index}", example["query"])


def _examples_editor() -> None:
    examples: list[dict[str, Any]] = st.session_state[EXAMPLES_KEY]
    st.markdown(f"**Examples** ({len(examples)}; a few-shot task needs 2 to 8)")
    for index, example in enumerate(examples):
        left, right = st.columns([5, 1])
        label = example["document"] or "(text given in the YAML)"
        left.text_input(f"Query for {label} {example.get('title') or ''}".strip(), key=f"example-query-{index}")
        right.button("Remove", key=f"remove-example-{index}", on_click=_remove_example, args=(index,))


def _spec_from_form(name: str, corpus: str, values: dict[str, Any]) -> TaskSpec:
    _sync_queries()
    examples = [
        ExampleSpec(query=e["query"], document_text=e["text"])
        if e.get("text")
        else ExampleSpec(query=e["query"], document=e["document"], source=e["source"])
        for e in st.session_state[EXAMPLES_KEY]
    ]
    return TaskSpec(
        name=name,
        corpus=corpus,
        description=values["description"],
        e_doc=values["e_doc"],
        e_query=values["e_query"],
        zero_shot=False,
        generation=GenerationSettings(queries_per_doc=values["queries_per_doc"]),
        examples=examples,
    )


def _save(context: Any, choice: str, name: str, corpus: str, values: dict[str, Any]) -> str:
    spec = _spec_from_form(name, corpus, values)
    if choice == NEW:
        task = create_task(context.session, spec)
        verb = "created"
    else:
        task = update_task(context.session, get_task(context.session, choice), spec)
        verb = "saved"
    context.session.commit()
    st.session_state[EDITING_KEY] = None
    st.session_state[NEXT_CHOICE_KEY] = task.name
    return f"Task {task.name} {verb} with {len(task.examples)} examples."


def _preview(context: Any, task_name: str) -> None:

    task = get_task(context.session, task_name)
    documents = list_documents(context.session, task.corpus)
    if not documents:
        st.info("The corpus has no documents to preview.")
        return
    labels = {f"{d.title or d.external_id} ({d.external_id})": d for d in documents}
    document = labels[st.selectbox("Sample document", list(labels), key="preview-document")]
    preview = attempt(lambda: preview_prompt(context.session, task, document))
    if preview is None:
        return
    st.code(preview.prompt, language=None, wrap_lines=True)
    if st.button("Try one generation", key="try-generation"):
        with st.spinner("Generating one query…"):
            llm = build_backend(context.settings)
            try:
                judgement = attempt(lambda: try_generation(context.session, task, document, llm))
            finally:
                llm.close()
        if judgement is not None:
            st.session_state["generated"] = (judgement.text, judgement.failure)
    generated = st.session_state.get("generated")
    if generated is not None:
        text, failure = generated
        st.markdown(f"Generated query: **{escape_markdown(text) or '(empty)'}**")
        if failure:
            st.warning(f"A run would count this generation as failed: {failure}.")


def _import_export(context: Any, task_name: str | None) -> None:
    st.subheader("Import and export")
    if task_name is not None:
        text = dump_task_spec(task_to_spec(get_task(context.session, task_name)))
        st.download_button("Export YAML", text, file_name=f"{task_name}.yaml", key="export-task")
    uploaded = st.text_area("Task YAML to import", key="import-yaml", height=150)
    if st.button("Import", key="import-task"):

        def do_import() -> str:
            try:
                data = yaml.safe_load(uploaded)
            except yaml.YAMLError as error:
                raise InvalidInputError(f"The YAML cannot be read: {str(error).splitlines()[0]}.") from None
            task = create_task(context.session, parse_task_spec(data, "The imported task"))
            context.session.commit()
            st.session_state[EDITING_KEY] = None
            st.session_state[NEXT_CHOICE_KEY] = task.name
            return f"Imported task {task.name} with {len(task.examples)} examples."

        message = attempt(do_import)
        if message:
            notify("success", message)
            st.rerun()


def render() -> None:
    st.header("Tasks")
    show_notice()
    with page_context() as context:
        tasks = {task.name: task for task in list_tasks(context.session)}
        corpora = [corpus.name for corpus in list_corpora(context.session)]
        if not corpora:
            st.info("Ingest a corpus first: a task's examples are documents of a corpus.")
            return
        if st.session_state.get(NEXT_CHOICE_KEY) in tasks:
            st.session_state["task-choice"] = st.session_state.pop(NEXT_CHOICE_KEY)
        choice = st.selectbox("Task", [NEW, *tasks], key="task-choice")
        current = task_to_spec(tasks[choice]) if choice != NEW else None
        _load_draft(choice, current)
        if choice == NEW:
            name = st.text_input("Name", key="task-name")
            corpus = st.selectbox("Corpus", corpora, key="task-corpus")
            _follow_corpus(str(corpus))
        else:
            assert current is not None
            name, corpus = current.name, current.corpus
            st.caption(f"Corpus: {corpus}")
        description = st.text_input(
            "Description", value=current.description if current else "", key=f"task-description-{choice}"
        )
        left, middle, right = st.columns(3)
        e_doc = left.text_input("e_doc", value=current.e_doc if current else "Document", key=f"task-e-doc-{choice}")
        e_query = middle.text_input(
            "e_query", value=current.e_query if current else "Query", key=f"task-e-query-{choice}"
        )
        queries_per_doc = right.number_input(
            "Queries per document",
            min_value=1,
            max_value=8,
            value=current.generation.queries_per_doc if current else 8,
            key=f"task-qpd-{choice}",
        )
        _example_finder(context, corpus)
        _examples_editor()
        values = {"description": description, "e_doc": e_doc, "e_query": e_query, "queries_per_doc": queries_per_doc}
        if st.button("Create task" if choice == NEW else "Save task", key="save-task", type="primary"):
            message = attempt(lambda: _save(context, choice, name, corpus, values))
            if message:
                notify("success", message)
                st.rerun()
        if choice != NEW:
            st.subheader("Prompt preview")
            _preview(context, choice)
        _import_export(context, None if choice == NEW else choice)


render()
