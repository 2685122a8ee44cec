"""The HTTP side (DESIGN §2): ``/api/v1`` (``api_v1.py``), its errors as RFC 9457 problem
details (``problems.py``) and the authentication dependencies (``deps.py``). The puppet
routes and the app factory (``create_api``, what uvicorn serves) are ``app.py``, which
mounts ``install_v1``; ``daemon/`` keeps Celery (issue 32)."""
