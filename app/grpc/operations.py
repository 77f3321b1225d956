"""gRPC for batch jobs: `Speech.LongRunningRecognize`'s submission and the standard
`google.longrunning.Operations` service (Get, List, Cancel, Delete, Wait), on the Speech port.

Job errors map to their own codes (NOT_FOUND, FAILED_PRECONDITION, RESOURCE_EXHAUSTED,
INVALID_ARGUMENT); calls are counted in `oasr_grpc_requests_total{method,code}` and need an
API key when the server has them, like every Speech call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
from google.longrunning import operations_pb2, operations_pb2_grpc
from google.protobuf import empty_pb2

from app.google.jobs import job_request
from app.google.operations import operation
from app.grpc.auth import presented_keys
from app.grpc.convert import RpcError
from app.jobs.errors import JobError
from app.jobs.system import JobSystem
from app.metrics import Metrics
from app.middleware import key_matches
from app.settings import Settings
from engine.errors import InvalidRequestError
from protos.oasr.speech.v1 import speech_pb2 as pb

T = TypeVar("T")

WAIT_DEFAULT_S = 60.0
"""WaitOperation without a timeout (and without a call deadline) answers after this long at most."""
WAIT_POLL_S = 0.25
"""How often WaitOperation looks at the store (the job may finish on another replica)."""


def _rpc_error(exc: JobError) -> RpcError:
    return RpcError(grpc.StatusCode[exc.grpc_code], exc.message)


async def submit_operation(jobs: JobSystem, request: pb.LongRunningRecognizeRequest) -> operations_pb2.Operation:
    try:
        return operation(await jobs.submit(job_request(request)))
    except InvalidRequestError as exc:
        raise RpcError(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from exc
    except JobError as exc:
        raise _rpc_error(exc) from exc


class OperationsServicer(operations_pb2_grpc.OperationsServicer):
    def __init__(self, jobs: JobSystem, settings: Settings, metrics: Metrics):
        self.jobs = jobs
        self._settings = settings
        self._metrics = metrics

    async def _call(self, method: str, context: grpc.aio.ServicerContext, work: Callable[[], Awaitable[T]]) -> T:
        code = grpc.StatusCode.OK
        started = time.monotonic()
        try:
            keys = self._settings.api_key
            if keys and not key_matches(presented_keys(context), keys):
                raise RpcError(grpc.StatusCode.UNAUTHENTICATED, "invalid or missing API key (send metadata "
                                                                "'authorization: Bearer <key>' or 'x-api-key')")
            try:
                return await work()
            except JobError as exc:
                raise _rpc_error(exc) from exc
        except RpcError as err:
            code = err.code
            await context.abort(err.code, err.message)
            raise  # not reached: abort raises
        except asyncio.CancelledError:
            code = grpc.StatusCode.CANCELLED
            raise
        finally:
            self._metrics.observe_grpc(method, code.name, time.monotonic() - started)

    async def GetOperation(self, request: operations_pb2.GetOperationRequest,
                           context: grpc.aio.ServicerContext) -> operations_pb2.Operation:
        async def work() -> operations_pb2.Operation:
            return operation(await self.jobs.get(request.name))

        return await self._call("GetOperation", context, work)

    async def ListOperations(self, request: operations_pb2.ListOperationsRequest,
                             context: grpc.aio.ServicerContext) -> operations_pb2.ListOperationsResponse:
        async def work() -> operations_pb2.ListOperationsResponse:
            page = await self.jobs.list(page_size=request.page_size, page_token=request.page_token,
                                        filter=request.filter)
            return operations_pb2.ListOperationsResponse(operations=[operation(j) for j in page.jobs],
                                                         next_page_token=page.next_token)

        return await self._call("ListOperations", context, work)

    async def CancelOperation(self, request: operations_pb2.CancelOperationRequest,
                              context: grpc.aio.ServicerContext) -> empty_pb2.Empty:
        async def work() -> empty_pb2.Empty:
            await self.jobs.cancel(request.name)
            return empty_pb2.Empty()

        return await self._call("CancelOperation", context, work)

    async def DeleteOperation(self, request: operations_pb2.DeleteOperationRequest,
                              context: grpc.aio.ServicerContext) -> empty_pb2.Empty:
        async def work() -> empty_pb2.Empty:
            await self.jobs.delete(request.name)
            return empty_pb2.Empty()

        return await self._call("DeleteOperation", context, work)

    async def WaitOperation(self, request: operations_pb2.WaitOperationRequest,
                            context: grpc.aio.ServicerContext) -> operations_pb2.Operation:
        """The operation once done, or as it is when `timeout` (else the call's deadline, else
        WAIT_DEFAULT_S) runs out, as Google's Operations service answers."""
        async def work() -> operations_pb2.Operation:
            budget = request.timeout.ToTimedelta().total_seconds() if request.HasField("timeout") else WAIT_DEFAULT_S
            remaining = context.time_remaining()
            if remaining is not None:
                budget = min(budget, max(0.0, remaining - 0.1))
            deadline = time.monotonic() + budget
            while True:
                job = await self.jobs.get(request.name)
                if job.done or time.monotonic() >= deadline:
                    return operation(job)
                await asyncio.sleep(min(WAIT_POLL_S, max(0.0, deadline - time.monotonic())))

        return await self._call("WaitOperation", context, work)
