"""Sign-in, tokens, API keys, roles and the authorisation rules (DESIGN §2).

The API (``web/``) and the dashboard share these modules: ``principal.Principal`` is
who is asking, ``rules.can(principal, action, target)`` is the one place that says
whether they may, ``tokens`` signs and checks JWTs, ``apikeys`` makes and recognises
machine keys, ``login`` checks a password against the directory or the store.
"""
