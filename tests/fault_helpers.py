"""Test-side faults that need no plan: a response lost on its way back, at a chosen call."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from botocore.exceptions import ConnectionClosedError
from botocore.httpsession import URLLib3Session

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


@contextlib.contextmanager
def response_lost(client: DynamoDBClient, operation: str, times: int = 1) -> Iterator[list]:
    """The next ``times`` calls of ``operation`` reach DynamoDB and take effect, but the
    response is lost on the way back, so the SDK retries the very same request.

    Yields a list that collects the status code of each swallowed response.
    """
    swallowed: list[int] = []
    session = URLLib3Session()

    def handler(request, **_kwargs):
        if len(swallowed) >= times:
            return None
        response = session.send(request)
        swallowed.append(response.status_code)
        raise ConnectionClosedError(endpoint_url=request.url)

    event = f"before-send.dynamodb.{operation}"
    client.meta.events.register(event, handler)
    try:
        yield swallowed
    finally:
        client.meta.events.unregister(event, handler)
