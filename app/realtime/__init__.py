"""The realtime transcription protocol (OpenAI's `/v1/realtime`, GA and beta shapes).

    config.py       session.update / transcription_session.update -> SessionConfig, and back
    events.py       server events (each with a unique event_id) and ProtocolError -> `error`
    audio_input.py  base64 / binary payloads -> float32 samples; container files refused
    session.py      RealtimeSession: client events -> the live core (app/live) -> server events

The WebSocket route (app/routes/realtime.py) admits, accepts and moves frames; everything
about the protocol lives here.
"""
