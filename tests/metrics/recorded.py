"""Reading what a real code path recorded: metrics turned on in this test process (a
plain registry, as the API with one worker has) and read back from prometheus_client's
registry, never by calling the facade.

``recording()`` restores the process's state afterwards, so tests elsewhere in the
session keep the CLI's behaviour (every facade call a no-op)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def recording(role: str = "hub_worker") -> Iterator[None]:
    from cheeto_like import metrics
    from cheeto_like.metrics import process

    was_active, was_state = metrics._active, dict(process._state)
    metrics.activate(role, None)
    try:
        yield
    finally:
        metrics._active = was_active
        process._state.update(was_state)


def sample(name: str, **labels: str) -> float:
    """A sample's value in this process's registry (0 when it was never recorded)."""
    from cheeto_like.metrics.families import REGISTRY

    return REGISTRY.get_sample_value(name, labels) or 0.0
