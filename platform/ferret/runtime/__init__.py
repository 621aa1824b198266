"""The composition root: the one place that builds settings, schema, index backend, job queue and connectors.

Every face (the CLI, the HTTP API, the admin page, the workers) gets its process's parts from here, so none of
them builds the domain's collaborators on its own. See ``ferret.runtime.context``.
"""
