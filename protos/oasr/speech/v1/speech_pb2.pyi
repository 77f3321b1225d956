import datetime

from google.longrunning import operations_pb2 as _operations_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RecognizeRequest(_message.Message):
    __slots__ = ("config", "audio")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    config: RecognitionConfig
    audio: RecognitionAudio
    def __init__(self, config: _Optional[_Union[RecognitionConfig, _Mapping]] = ..., audio: _Optional[_Union[RecognitionAudio, _Mapping]] = ...) -> None: ...

class RecognitionAudio(_message.Message):
    __slots__ = ("content", "uri")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    content: bytes
    uri: str
    def __init__(self, content: _Optional[bytes] = ..., uri: _Optional[str] = ...) -> None: ...

class RecognitionConfig(_message.Message):
    __slots__ = ("encoding", "sample_rate_hertz", "language_code", "max_alternatives", "audio_channel_count", "enable_word_time_offsets", "enable_automatic_punctuation", "enable_separate_recognition_per_channel", "model", "enable_word_confidence", "speech_contexts", "decoding", "request_id")
    class AudioEncoding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ENCODING_UNSPECIFIED: _ClassVar[RecognitionConfig.AudioEncoding]
        LINEAR16: _ClassVar[RecognitionConfig.AudioEncoding]
        FLAC: _ClassVar[RecognitionConfig.AudioEncoding]
        MULAW: _ClassVar[RecognitionConfig.AudioEncoding]
        OGG_OPUS: _ClassVar[RecognitionConfig.AudioEncoding]
        MP3: _ClassVar[RecognitionConfig.AudioEncoding]
        WEBM_OPUS: _ClassVar[RecognitionConfig.AudioEncoding]
        ALAW: _ClassVar[RecognitionConfig.AudioEncoding]
        WAV: _ClassVar[RecognitionConfig.AudioEncoding]
        LINEAR32F: _ClassVar[RecognitionConfig.AudioEncoding]
        AUTO: _ClassVar[RecognitionConfig.AudioEncoding]
    ENCODING_UNSPECIFIED: RecognitionConfig.AudioEncoding
    LINEAR16: RecognitionConfig.AudioEncoding
    FLAC: RecognitionConfig.AudioEncoding
    MULAW: RecognitionConfig.AudioEncoding
    OGG_OPUS: RecognitionConfig.AudioEncoding
    MP3: RecognitionConfig.AudioEncoding
    WEBM_OPUS: RecognitionConfig.AudioEncoding
    ALAW: RecognitionConfig.AudioEncoding
    WAV: RecognitionConfig.AudioEncoding
    LINEAR32F: RecognitionConfig.AudioEncoding
    AUTO: RecognitionConfig.AudioEncoding
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HERTZ_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_CODE_FIELD_NUMBER: _ClassVar[int]
    MAX_ALTERNATIVES_FIELD_NUMBER: _ClassVar[int]
    AUDIO_CHANNEL_COUNT_FIELD_NUMBER: _ClassVar[int]
    ENABLE_WORD_TIME_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    ENABLE_AUTOMATIC_PUNCTUATION_FIELD_NUMBER: _ClassVar[int]
    ENABLE_SEPARATE_RECOGNITION_PER_CHANNEL_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ENABLE_WORD_CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    SPEECH_CONTEXTS_FIELD_NUMBER: _ClassVar[int]
    DECODING_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    encoding: RecognitionConfig.AudioEncoding
    sample_rate_hertz: int
    language_code: str
    max_alternatives: int
    audio_channel_count: int
    enable_word_time_offsets: bool
    enable_automatic_punctuation: bool
    enable_separate_recognition_per_channel: bool
    model: str
    enable_word_confidence: bool
    speech_contexts: _containers.RepeatedCompositeFieldContainer[SpeechContext]
    decoding: DecodingExtensions
    request_id: str
    def __init__(self, encoding: _Optional[_Union[RecognitionConfig.AudioEncoding, str]] = ..., sample_rate_hertz: _Optional[int] = ..., language_code: _Optional[str] = ..., max_alternatives: _Optional[int] = ..., audio_channel_count: _Optional[int] = ..., enable_word_time_offsets: _Optional[bool] = ..., enable_automatic_punctuation: _Optional[bool] = ..., enable_separate_recognition_per_channel: _Optional[bool] = ..., model: _Optional[str] = ..., enable_word_confidence: _Optional[bool] = ..., speech_contexts: _Optional[_Iterable[_Union[SpeechContext, _Mapping]]] = ..., decoding: _Optional[_Union[DecodingExtensions, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class SpeechContext(_message.Message):
    __slots__ = ("phrases", "boost")
    PHRASES_FIELD_NUMBER: _ClassVar[int]
    BOOST_FIELD_NUMBER: _ClassVar[int]
    phrases: _containers.RepeatedScalarFieldContainer[str]
    boost: float
    def __init__(self, phrases: _Optional[_Iterable[str]] = ..., boost: _Optional[float] = ...) -> None: ...

class DecodingExtensions(_message.Message):
    __slots__ = ("beam_size", "temperature", "prompt", "task", "top_k", "top_p", "max_new_tokens", "seed", "stream_context", "delay")
    class Task(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        TASK_UNSPECIFIED: _ClassVar[DecodingExtensions.Task]
        TRANSCRIBE: _ClassVar[DecodingExtensions.Task]
        TRANSLATE: _ClassVar[DecodingExtensions.Task]
    TASK_UNSPECIFIED: DecodingExtensions.Task
    TRANSCRIBE: DecodingExtensions.Task
    TRANSLATE: DecodingExtensions.Task
    BEAM_SIZE_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    MAX_NEW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    STREAM_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    beam_size: int
    temperature: float
    prompt: str
    task: DecodingExtensions.Task
    top_k: int
    top_p: float
    max_new_tokens: int
    seed: int
    stream_context: StreamContext
    delay: str
    def __init__(self, beam_size: _Optional[int] = ..., temperature: _Optional[float] = ..., prompt: _Optional[str] = ..., task: _Optional[_Union[DecodingExtensions.Task, str]] = ..., top_k: _Optional[int] = ..., top_p: _Optional[float] = ..., max_new_tokens: _Optional[int] = ..., seed: _Optional[int] = ..., stream_context: _Optional[_Union[StreamContext, _Mapping]] = ..., delay: _Optional[str] = ...) -> None: ...

class StreamContext(_message.Message):
    __slots__ = ("left", "chunk", "right")
    LEFT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    RIGHT_FIELD_NUMBER: _ClassVar[int]
    left: int
    chunk: int
    right: int
    def __init__(self, left: _Optional[int] = ..., chunk: _Optional[int] = ..., right: _Optional[int] = ...) -> None: ...

class RecognizeResponse(_message.Message):
    __slots__ = ("results", "total_billed_time", "request_id", "oasr_request_id")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BILLED_TIME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    OASR_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SpeechRecognitionResult]
    total_billed_time: _duration_pb2.Duration
    request_id: int
    oasr_request_id: str
    def __init__(self, results: _Optional[_Iterable[_Union[SpeechRecognitionResult, _Mapping]]] = ..., total_billed_time: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., request_id: _Optional[int] = ..., oasr_request_id: _Optional[str] = ...) -> None: ...

class SpeechRecognitionResult(_message.Message):
    __slots__ = ("alternatives", "channel_tag", "result_end_time", "language_code")
    ALTERNATIVES_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_TAG_FIELD_NUMBER: _ClassVar[int]
    RESULT_END_TIME_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_CODE_FIELD_NUMBER: _ClassVar[int]
    alternatives: _containers.RepeatedCompositeFieldContainer[SpeechRecognitionAlternative]
    channel_tag: int
    result_end_time: _duration_pb2.Duration
    language_code: str
    def __init__(self, alternatives: _Optional[_Iterable[_Union[SpeechRecognitionAlternative, _Mapping]]] = ..., channel_tag: _Optional[int] = ..., result_end_time: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., language_code: _Optional[str] = ...) -> None: ...

class SpeechRecognitionAlternative(_message.Message):
    __slots__ = ("transcript", "confidence", "words")
    TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    WORDS_FIELD_NUMBER: _ClassVar[int]
    transcript: str
    confidence: float
    words: _containers.RepeatedCompositeFieldContainer[WordInfo]
    def __init__(self, transcript: _Optional[str] = ..., confidence: _Optional[float] = ..., words: _Optional[_Iterable[_Union[WordInfo, _Mapping]]] = ...) -> None: ...

class WordInfo(_message.Message):
    __slots__ = ("start_time", "end_time", "word", "confidence")
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    WORD_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    start_time: _duration_pb2.Duration
    end_time: _duration_pb2.Duration
    word: str
    confidence: float
    def __init__(self, start_time: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., end_time: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., word: _Optional[str] = ..., confidence: _Optional[float] = ...) -> None: ...

class StreamingRecognizeRequest(_message.Message):
    __slots__ = ("streaming_config", "audio_content")
    STREAMING_CONFIG_FIELD_NUMBER: _ClassVar[int]
    AUDIO_CONTENT_FIELD_NUMBER: _ClassVar[int]
    streaming_config: StreamingRecognitionConfig
    audio_content: bytes
    def __init__(self, streaming_config: _Optional[_Union[StreamingRecognitionConfig, _Mapping]] = ..., audio_content: _Optional[bytes] = ...) -> None: ...

class StreamingRecognitionConfig(_message.Message):
    __slots__ = ("config", "single_utterance", "interim_results", "enable_voice_activity_events")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    SINGLE_UTTERANCE_FIELD_NUMBER: _ClassVar[int]
    INTERIM_RESULTS_FIELD_NUMBER: _ClassVar[int]
    ENABLE_VOICE_ACTIVITY_EVENTS_FIELD_NUMBER: _ClassVar[int]
    config: RecognitionConfig
    single_utterance: bool
    interim_results: bool
    enable_voice_activity_events: bool
    def __init__(self, config: _Optional[_Union[RecognitionConfig, _Mapping]] = ..., single_utterance: _Optional[bool] = ..., interim_results: _Optional[bool] = ..., enable_voice_activity_events: _Optional[bool] = ...) -> None: ...

class Status(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class StreamingRecognizeResponse(_message.Message):
    __slots__ = ("error", "results", "speech_event_type", "total_billed_time", "speech_event_time", "request_id", "oasr_request_id")
    class SpeechEventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SPEECH_EVENT_UNSPECIFIED: _ClassVar[StreamingRecognizeResponse.SpeechEventType]
        END_OF_SINGLE_UTTERANCE: _ClassVar[StreamingRecognizeResponse.SpeechEventType]
        SPEECH_ACTIVITY_BEGIN: _ClassVar[StreamingRecognizeResponse.SpeechEventType]
        SPEECH_ACTIVITY_END: _ClassVar[StreamingRecognizeResponse.SpeechEventType]
    SPEECH_EVENT_UNSPECIFIED: StreamingRecognizeResponse.SpeechEventType
    END_OF_SINGLE_UTTERANCE: StreamingRecognizeResponse.SpeechEventType
    SPEECH_ACTIVITY_BEGIN: StreamingRecognizeResponse.SpeechEventType
    SPEECH_ACTIVITY_END: StreamingRecognizeResponse.SpeechEventType
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    SPEECH_EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BILLED_TIME_FIELD_NUMBER: _ClassVar[int]
    SPEECH_EVENT_TIME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    OASR_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    error: Status
    results: _containers.RepeatedCompositeFieldContainer[StreamingRecognitionResult]
    speech_event_type: StreamingRecognizeResponse.SpeechEventType
    total_billed_time: _duration_pb2.Duration
    speech_event_time: _duration_pb2.Duration
    request_id: int
    oasr_request_id: str
    def __init__(self, error: _Optional[_Union[Status, _Mapping]] = ..., results: _Optional[_Iterable[_Union[StreamingRecognitionResult, _Mapping]]] = ..., speech_event_type: _Optional[_Union[StreamingRecognizeResponse.SpeechEventType, str]] = ..., total_billed_time: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., speech_event_time: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., request_id: _Optional[int] = ..., oasr_request_id: _Optional[str] = ...) -> None: ...

class StreamingRecognitionResult(_message.Message):
    __slots__ = ("alternatives", "is_final", "stability", "result_end_time", "channel_tag", "language_code")
    ALTERNATIVES_FIELD_NUMBER: _ClassVar[int]
    IS_FINAL_FIELD_NUMBER: _ClassVar[int]
    STABILITY_FIELD_NUMBER: _ClassVar[int]
    RESULT_END_TIME_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_TAG_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_CODE_FIELD_NUMBER: _ClassVar[int]
    alternatives: _containers.RepeatedCompositeFieldContainer[SpeechRecognitionAlternative]
    is_final: bool
    stability: float
    result_end_time: _duration_pb2.Duration
    channel_tag: int
    language_code: str
    def __init__(self, alternatives: _Optional[_Iterable[_Union[SpeechRecognitionAlternative, _Mapping]]] = ..., is_final: _Optional[bool] = ..., stability: _Optional[float] = ..., result_end_time: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., channel_tag: _Optional[int] = ..., language_code: _Optional[str] = ...) -> None: ...

class LongRunningRecognizeRequest(_message.Message):
    __slots__ = ("config", "audio", "callback")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    CALLBACK_FIELD_NUMBER: _ClassVar[int]
    config: RecognitionConfig
    audio: RecognitionAudio
    callback: WebhookCallback
    def __init__(self, config: _Optional[_Union[RecognitionConfig, _Mapping]] = ..., audio: _Optional[_Union[RecognitionAudio, _Mapping]] = ..., callback: _Optional[_Union[WebhookCallback, _Mapping]] = ...) -> None: ...

class WebhookCallback(_message.Message):
    __slots__ = ("url", "secret")
    URL_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    url: str
    secret: str
    def __init__(self, url: _Optional[str] = ..., secret: _Optional[str] = ...) -> None: ...

class LongRunningRecognizeResponse(_message.Message):
    __slots__ = ("results", "total_billed_time", "request_id", "oasr_request_id")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BILLED_TIME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    OASR_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SpeechRecognitionResult]
    total_billed_time: _duration_pb2.Duration
    request_id: int
    oasr_request_id: str
    def __init__(self, results: _Optional[_Iterable[_Union[SpeechRecognitionResult, _Mapping]]] = ..., total_billed_time: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., request_id: _Optional[int] = ..., oasr_request_id: _Optional[str] = ...) -> None: ...

class LongRunningRecognizeMetadata(_message.Message):
    __slots__ = ("progress_percent", "start_time", "last_update_time", "uri", "state", "attempts", "webhook")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATE_UNSPECIFIED: _ClassVar[LongRunningRecognizeMetadata.State]
        QUEUED: _ClassVar[LongRunningRecognizeMetadata.State]
        RUNNING: _ClassVar[LongRunningRecognizeMetadata.State]
        SUCCEEDED: _ClassVar[LongRunningRecognizeMetadata.State]
        FAILED: _ClassVar[LongRunningRecognizeMetadata.State]
        CANCELLED: _ClassVar[LongRunningRecognizeMetadata.State]
    STATE_UNSPECIFIED: LongRunningRecognizeMetadata.State
    QUEUED: LongRunningRecognizeMetadata.State
    RUNNING: LongRunningRecognizeMetadata.State
    SUCCEEDED: LongRunningRecognizeMetadata.State
    FAILED: LongRunningRecognizeMetadata.State
    CANCELLED: LongRunningRecognizeMetadata.State
    PROGRESS_PERCENT_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    WEBHOOK_FIELD_NUMBER: _ClassVar[int]
    progress_percent: int
    start_time: _timestamp_pb2.Timestamp
    last_update_time: _timestamp_pb2.Timestamp
    uri: str
    state: LongRunningRecognizeMetadata.State
    attempts: int
    webhook: WebhookDelivery
    def __init__(self, progress_percent: _Optional[int] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., uri: _Optional[str] = ..., state: _Optional[_Union[LongRunningRecognizeMetadata.State, str]] = ..., attempts: _Optional[int] = ..., webhook: _Optional[_Union[WebhookDelivery, _Mapping]] = ...) -> None: ...

class WebhookDelivery(_message.Message):
    __slots__ = ("url", "state", "attempts", "delivery_id", "last_error", "last_attempt_time")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATE_UNSPECIFIED: _ClassVar[WebhookDelivery.State]
        PENDING: _ClassVar[WebhookDelivery.State]
        DELIVERED: _ClassVar[WebhookDelivery.State]
        FAILED: _ClassVar[WebhookDelivery.State]
    STATE_UNSPECIFIED: WebhookDelivery.State
    PENDING: WebhookDelivery.State
    DELIVERED: WebhookDelivery.State
    FAILED: WebhookDelivery.State
    URL_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    LAST_ATTEMPT_TIME_FIELD_NUMBER: _ClassVar[int]
    url: str
    state: WebhookDelivery.State
    attempts: int
    delivery_id: str
    last_error: str
    last_attempt_time: _timestamp_pb2.Timestamp
    def __init__(self, url: _Optional[str] = ..., state: _Optional[_Union[WebhookDelivery.State, str]] = ..., attempts: _Optional[int] = ..., delivery_id: _Optional[str] = ..., last_error: _Optional[str] = ..., last_attempt_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
