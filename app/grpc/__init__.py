"""The gRPC surface (`oasr.speech.v1.Speech`): listener, servicer, live streams, proto <-> engine types."""
