"""The prometheus_client objects behind the facade, made from ``names.SPECS`` on first use.

Only a process that called ``metrics.activate`` imports this module (the facade checks
first), so the CLI never pays for ``prometheus_client``. A family is created once per
process (memoized under a lock: Celery's threads and the API's event loop may both
record) and registered in ``REGISTRY``, this package's own registry, never
prometheus_client's global one (Flower and other libraries put their own families
there). In multiprocess mode (``process.activate`` with a directory) the values live in
the mmap files of that directory instead, and the exposition reads those.

A name that is not in ``SPECS``, a ``collected`` family, or labels other than the spec's
are a ``ValueError``: a programming error at the call site, which tests catch, never
something to guess around.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics import MetricWrapperBase

from .names import SPECS, Spec

REGISTRY = CollectorRegistry(auto_describe=True)

_families: dict[str, MetricWrapperBase] = {}
_lock = threading.Lock()


def spec_of(name: str) -> Spec:
    """The spec of ``name``; ``ValueError`` for a name the table does not hold."""
    spec = SPECS.get(name)
    if spec is None:
        raise ValueError(f"unknown metric family {name!r}: add it to metrics/names.py SPECS")
    return spec


def check_labels(name: str, spec: Spec, labels: Iterable[str]) -> None:
    """``ValueError`` unless ``labels`` are exactly the spec's label names."""
    given = sorted(labels)
    if given != sorted(spec.labels):
        raise ValueError(f"metric {name} takes labels {list(spec.labels)}, not {given}")


def _create(name: str, spec: Spec) -> MetricWrapperBase:
    # the full name goes to prometheus_client, which strips a counter's _total itself
    if spec.kind == "counter":
        return Counter(name, spec.help, spec.labels, registry=REGISTRY)
    if spec.kind == "gauge":
        return Gauge(name, spec.help, spec.labels, registry=REGISTRY,
                     multiprocess_mode=spec.multiprocess_mode)  # type: ignore[arg-type]
    return Histogram(name, spec.help, spec.labels, registry=REGISTRY,
                     buckets=spec.buckets or Histogram.DEFAULT_BUCKETS)


def metric(name: str) -> MetricWrapperBase:
    """The family ``name`` (created on the first call), unlabelled."""
    found = _families.get(name)
    if found is not None:
        return found
    spec = spec_of(name)
    if spec.collected:
        raise ValueError(f"metric {name} is collected at scrape time (a collector yields "
                         "it); it is never recorded by a call")
    with _lock:
        found = _families.get(name)
        if found is None:
            found = _families[name] = _create(name, spec)
    return found


def family(name: str, labels: Mapping[str, Any]) -> Any:
    """The child of family ``name`` for ``labels`` (values turned into strings), or the
    family itself when the spec has no labels: what ``inc``/``observe``/``set`` go to."""
    spec = spec_of(name)
    check_labels(name, spec, labels)
    found = metric(name)
    if not spec.labels:
        return found
    return found.labels(**{key: str(value) for key, value in labels.items()})


def collected(name: str, rows: Iterable[tuple[Mapping[str, Any], float]]) -> Any:
    """A metric family for a scrape-time collector: ``rows`` are (labels, value) pairs,
    each checked against the spec of ``name`` (which must be a gauge or counter).

    Collectors yield what this returns, so the names and labels they expose are the
    table's as surely as the recorded families'."""
    spec = spec_of(name)
    labelnames = list(spec.labels)
    built: Any
    if spec.kind == "counter":
        built = CounterMetricFamily(name, spec.help, labels=labelnames)
    elif spec.kind == "gauge":
        built = GaugeMetricFamily(name, spec.help, labels=labelnames)
    else:
        raise ValueError(f"metric {name} is a histogram: collectors yield gauges or counters")
    for labels, value in rows:
        check_labels(name, spec, labels)
        built.add_metric([str(labels[key]) for key in labelnames], float(value))
    return built


def created() -> list[str]:
    """Names of the families this process created so far (tests, diagnostics)."""
    return sorted(_families)
