"""Deepgram's live transcription protocol (`GET /v1/listen`), a thin adapter over the live-session
core (app/live), for voice-agent frameworks that speak it.

    params.py    the query string -> ListenParams (served, accepted-and-ignored, refused)
    audio.py     binary frames -> model-rate samples (headerless PCM / G.711, or a container)
    messages.py  Results, SpeechStarted, UtteranceEnd, Metadata and Error as dicts
    session.py   ListenSession: client messages in, turn events out, in segment order

The WebSocket route is app/routes/listen.py; docs/api.md documents the protocol.
"""
