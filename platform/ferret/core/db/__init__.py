"""All SQL lives here: typed SQLAlchemy 2.0 models and query functions that take the session."""
