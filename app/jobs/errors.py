"""Errors of the job system, each carrying the HTTP status and gRPC code a surface answers with.

    JobError                 base: http_status, grpc_code (a google.rpc.Code name)
    ├── InvalidJobError      400 INVALID_ARGUMENT: bad config, audio, uri or callback
    ├── OperationNotFound    404 NOT_FOUND: no operation of that name (or it expired)
    ├── OperationDone        400 FAILED_PRECONDITION: cancelling a finished operation
    ├── SpoolFull            429 RESOURCE_EXHAUSTED: --jobs-spool-max-mib would be exceeded
    └── StorageFull          507 RESOURCE_EXHAUSTED: the spool's or the database's disk is full
"""

from __future__ import annotations


class JobError(Exception):
    http_status = 500
    grpc_code = "INTERNAL"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class InvalidJobError(JobError):
    http_status = 400
    grpc_code = "INVALID_ARGUMENT"


class OperationNotFound(JobError):
    http_status = 404
    grpc_code = "NOT_FOUND"

    def __init__(self, name: str):
        super().__init__(f"operation {name!r} not found (it never existed, was deleted, or expired)")


class OperationDone(JobError):
    http_status = 400
    grpc_code = "FAILED_PRECONDITION"


class SpoolFull(JobError):
    http_status = 429
    grpc_code = "RESOURCE_EXHAUSTED"


class StorageFull(JobError):
    """The disk under the spool or the job database has no room (ENOSPC, EDQUOT): the server's
    storage, not the client's request, is the problem (HTTP 507 Insufficient Storage)."""

    http_status = 507
    grpc_code = "RESOURCE_EXHAUSTED"
