"""Documentation kept in a Git repository (docs as code), synced by commit SHA and diff with the git CLI."""
