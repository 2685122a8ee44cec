"""The read path: pure async helpers that return documents or small dataclasses.

Every helper takes an optional ``session`` so operations can read their own uncommitted
writes inside a transaction. Joins are batched ``$in`` queries whose count does not grow
with the data.
"""
