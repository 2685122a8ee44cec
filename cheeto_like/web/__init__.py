"""The HTTP side (DESIGN §2): ``/api/v1`` (``api_v1.py``), its errors as RFC 9457 problem
details (``problems.py``) and the authentication dependencies (``deps.py``). The puppet
routes and the app factory stay in ``daemon/api.py``, which mounts ``install_v1``."""
