"""Google Speech API shapes (protobuf messages) shared by the REST routes, the gRPC servicer and batch jobs."""
