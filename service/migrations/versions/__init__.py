"""The migration scripts, oldest first (0001 is the schema before migrations existed)."""
