"""``python -m cheeto_like …`` = ``cheeto …`` (the site worker starts its quota agent so,
with the interpreter it runs under, whatever PATH says)."""

from .cli import console_main

console_main()
