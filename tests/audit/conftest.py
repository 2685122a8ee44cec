"""The SMTP sink and the chat webhook sink for the audit's digest."""

from collections.abc import Iterator

import pytest

from tests.services.chat_sink import ChatSink
from tests.services.fixtures_people import mailbox, smtp_server

__all__ = ["chat", "chat_server", "mailbox", "smtp_server"]


@pytest.fixture(scope="session")
def chat_server() -> Iterator[ChatSink]:
    sink = ChatSink().start()
    yield sink
    sink.stop()


@pytest.fixture
def chat(chat_server: ChatSink) -> ChatSink:
    chat_server.messages.clear()
    chat_server.faults.clear()
    return chat_server
