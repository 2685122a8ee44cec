"""The submit-time quota check: slurmctld's Lua plugin, the completion hook, and the
head-node table the site worker keeps for them (issue 26).

- ``layout``: where every file of a site lives, and what each is for;
- ``render``/``install``: the plugin, the hook, the slurm.conf lines (``ng site
  enforcement``), and the check of a live cluster's config;
- ``table``: the SQLite files (the worker's quota table, the plugin's reservations);
- ``desired``: the table's rows from the store (queries only);
- ``charge``: finished jobs from the hook's spool into the usage ledger;
- ``agent``: the loop the site worker runs (``cheeto daemon quota-agent``).
"""
