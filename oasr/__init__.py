"""Python clients of an OASR server (`oasr.client`): `OASRClient` and `AsyncOASRClient` transcribe
files over REST, stream audio over the realtime WebSocket (resuming a dropped connection) and
recognize over gRPC. The records they return and the errors they raise are in `oasr.types`."""

from oasr.client import AsyncOASRClient, OASRClient
from oasr.types import (
    APIError,
    OASRError,
    Recognition,
    ServerUnreachable,
    StreamError,
    StreamEvent,
    Transcription,
)

__all__ = ["APIError", "AsyncOASRClient", "OASRClient", "OASRError", "Recognition", "ServerUnreachable",
           "StreamError", "StreamEvent", "Transcription"]
