"""The ports through which documents enter the domain: the connector capability interfaces and the document model.

``ferret.connectors`` implements these interfaces; the domain (ingest, push, jobs) only ever sees them, and is handed
connectors by the runtime through a ``ConnectorFactory``.
"""
