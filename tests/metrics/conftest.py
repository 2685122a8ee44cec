"""The fake HiPPO and IAM servers, for the people reconcilers' run metrics."""

from tests.services.fixtures_people import fake_hippo_server, fake_iam_server, hippo, iam

__all__ = ["fake_hippo_server", "fake_iam_server", "hippo", "iam"]
