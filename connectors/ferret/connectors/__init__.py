"""Document sources: capability interfaces, a lazy registry and the connectors themselves."""
