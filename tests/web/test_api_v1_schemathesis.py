"""Schemathesis over ``/api/v1`` of a live ``cheeto daemon api``, signed in as an admin
(so every route is reachable): generated requests, positive and negative, must never
get a 5xx, and every response must match the OpenAPI document (status, content type,
body). Bounded by ``max_examples`` per mode (about a minute in all)."""

from __future__ import annotations

from collections.abc import AsyncIterator

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

from cheeto_like.auth.principal import subject_of
from cheeto_like.auth.tokens import TokenIssuer
from cheeto_like.config import ApiConfig, MongoConfig
from cheeto_like.store import Store
from tests.daemon.test_api_live import Server, write_config
from tests.web.conftest import STATIC_KEY

__all__ = ["database"]


@pytest.fixture(scope="module")
def database(request: pytest.FixtureRequest) -> str:
    from tests.conftest import module_database

    return module_database(request)


@pytest.fixture(scope="module")
async def live(world: Store, mongo_config: MongoConfig, database: str,
               tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Server, str]]:
    tmp = tmp_path_factory.mktemp("v1-schema")
    key_file = tmp / "jwt.key"
    config = write_config(tmp / "config.yaml", mongo_config, database, api_key=STATIC_KEY,
                          jwt_key_file=str(key_file))
    srv = Server(config, tmp / "api.log").wait()
    token, _ = TokenIssuer.from_config(ApiConfig(jwt_key_file=key_file)).issue(
        await subject_of("adam"))
    try:
        yield srv, token
    finally:
        srv.stop()


CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_v1_has_no_server_errors(live, mode):  # type: ignore[no-untyped-def]
    server, token = live
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json").include(
        path_regex="^/api/v1/").exclude(path="/api/v1/logout")  # logout would sign us out
    headers = {"Authorization": f"Bearer {token}"}
    seen: set[str] = set()

    @given(case=schema.as_strategy(generation_mode=mode))
    @settings(max_examples=150, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case: schemathesis.Case) -> None:
        response = case.call(base_url=server.url, headers=headers, timeout=15)
        seen.add(case.path)
        assert response.status_code < 500, (case.method, case.path, case.path_parameters,
                                            case.query, response.text)
        case.validate_response(response, checks=CHECKS)

    check()
    assert len(seen) >= 10, seen
