"""The legacy puppet.hpc account YAML: its schema, the additive merge that layers a
site's files over the common ones, and a YAML reader/writer with that format's quirks.

Nothing here touches the store: ``cheeto puppet validate`` checks files an admin edits
by hand, and the puppet export (issue 4) reuses the schema and the dumper.
"""
