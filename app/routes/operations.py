"""Google-shaped long-running recognition over REST: submit a job, then read, list, cancel
and delete its operation.

    POST   /v1/speech:longrunningrecognize   {"config": {...}, "audio": {"content" | "uri"}, "callback"?}
    GET    /v1/operations/{name}
    GET    /v1/operations?pageSize=&pageToken=&filter=
    POST   /v1/operations/{name}:cancel
    DELETE /v1/operations/{name}

Bodies and answers are the proto3 JSON mapping of `google.cloud.speech.v1` and `google.longrunning`
messages, as Google's REST API speaks them (Google's fields only; `?extensions=true` adds ours);
errors use Google's envelope.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from google.protobuf import json_format

from app.errors import ApiError
from app.google.jobs import job_request
from app.google.operations import operation_json
from app.google.wire import strip_request_hints
from app.jobs.errors import JobError
from app.jobs.system import JobSystem
from engine.errors import InvalidRequestError
from protos.oasr.speech.v1 import speech_pb2 as pb

router = APIRouter(tags=["operations"])


def get_jobs(request: Request) -> JobSystem:
    jobs: JobSystem = request.app.state.jobs
    return jobs


JobsDep = Annotated[JobSystem, Depends(get_jobs)]
ExtensionsQuery = Annotated[bool, Query(
    description="also show OASR's fields (metadata state, attempts, webhook; response oasrRequestId); "
                "off by default because Google's client parses operations strictly")]


def _api_error(exc: JobError) -> ApiError:
    return ApiError(exc.http_status, exc.message, status_name=exc.grpc_code)


@router.post("/v1/speech:longrunningrecognize")
async def longrunningrecognize(request: Request, jobs: JobsDep, extensions: ExtensionsQuery = False) -> JSONResponse:
    body = await request.body()
    try:
        payload = json.loads(body)
        if not isinstance(payload, dict):
            raise ValueError(f"a JSON object is expected, not {type(payload).__name__}")
        message = json_format.ParseDict(strip_request_hints(payload), pb.LongRunningRecognizeRequest())
    except InvalidRequestError as exc:
        raise ApiError(400, str(exc)) from exc
    except (ValueError, json_format.ParseError) as exc:
        raise ApiError(400, f"the body must be a LongRunningRecognizeRequest in JSON "
                            f"({{\"config\": {{...}}, \"audio\": {{\"content\": base64}} or {{\"uri\": ...}}}}): {exc}"
                       ) from exc
    try:
        job = await jobs.submit(job_request(message))
    except InvalidRequestError as exc:
        raise ApiError(400, str(exc)) from exc
    except JobError as exc:
        raise _api_error(exc) from exc
    return JSONResponse(operation_json(job, extensions=extensions))


@router.get("/v1/operations/{name}")
async def get_operation(name: str, jobs: JobsDep, extensions: ExtensionsQuery = False) -> JSONResponse:
    try:
        return JSONResponse(operation_json(await jobs.get(name), extensions=extensions))
    except JobError as exc:
        raise _api_error(exc) from exc


@router.get("/v1/operations")
async def list_operations(
    jobs: JobsDep,
    extensions: ExtensionsQuery = False,
    page_size: Annotated[int, Query(alias="pageSize", ge=0, description="at most 1000; 0 means 50")] = 0,
    page_token: Annotated[str, Query(alias="pageToken")] = "",
    filter: Annotated[str, Query(description="state=QUEUED|RUNNING|SUCCEEDED|FAILED|CANCELLED or done=true|false, "
                                             "joined with OR")] = "",
) -> JSONResponse:
    try:
        page = await jobs.list(page_size=page_size, page_token=page_token, filter=filter)
    except JobError as exc:
        raise _api_error(exc) from exc
    body: dict[str, Any] = {"operations": [operation_json(j, extensions=extensions) for j in page.jobs], "nextPageToken": page.next_token}
    return JSONResponse(body)


@router.post("/v1/operations/{name}:cancel")
async def cancel_operation(name: str, jobs: JobsDep) -> JSONResponse:
    try:
        await jobs.cancel(name)
    except JobError as exc:
        raise _api_error(exc) from exc
    return JSONResponse({})


@router.delete("/v1/operations/{name}")
async def delete_operation(name: str, jobs: JobsDep) -> JSONResponse:
    try:
        await jobs.delete(name)
    except JobError as exc:
        raise _api_error(exc) from exc
    return JSONResponse({})
