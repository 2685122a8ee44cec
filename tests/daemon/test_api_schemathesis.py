"""Property-based run of the API against its own OpenAPI document (schemathesis).

A live ``cheeto daemon api`` serves the golden ``farm`` site; schemathesis generates
requests for every operation (examples, positive and negative data, with and without
the key) and checks that no response is a 5xx and that every response conforms to the
document (status codes, content types, bodies). Bounded by ``max_examples``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from cheeto_like.config import MongoConfig
from cheeto_like.store import Store
from tests.daemon.test_api_live import KEY, Server, database, seeded, write_config

__all__ = ["database", "seeded"]  # module fixtures reused from the live tests


@pytest.fixture(scope="module")
def live_api(seeded: Store, mongo_config: MongoConfig, database: str,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("api-schema")
    config = write_config(tmp / "config.yaml", mongo_config, database, api_key=KEY)
    srv = Server(config, tmp / "api.log").wait()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def api_schema(live_api: Server) -> schemathesis.BaseSchema:
    # /api/v1 has its own run, signed in (tests/web/test_api_v1_schemathesis.py)
    return schemathesis.openapi.from_url(f"{live_api.url}/openapi.json").exclude(
        path_regex="^/api/v1/")


CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
@pytest.mark.parametrize("with_key", [True, False], ids=["key", "no-key"])
def test_no_server_errors(live_api, api_schema, mode, with_key):
    """Every operation of the document, generated data; no 5xx, every response documented.

    (Driven through Hypothesis directly: schemathesis' pytest loader does not run under
    pytest 9.)
    """
    headers = {"X-API-Key": KEY} if with_key else {}
    statuses: set[tuple[str, int]] = set()

    @given(case=api_schema.as_strategy(generation_mode=mode))
    @settings(max_examples=60, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case: schemathesis.Case) -> None:
        response = case.call(base_url=live_api.url, headers=headers, timeout=15)
        statuses.add((case.path, response.status_code))
        assert response.status_code < 500, (case.path, case.path_parameters, response.text)
        case.validate_response(response, checks=CHECKS)
        if not with_key and case.path != "/healthz":
            assert response.status_code == 401

    check()
    paths = {path for path, _ in statuses}
    assert {"/puppet/root-keys/{site}", "/puppet/storage/{site}"} <= paths, statuses
