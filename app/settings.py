"""Server settings: environment variables `OASR_<NAME>` or `oasr serve --<name>` flags.

Each field's docstring is its documentation (docs/configuration.md is generated from it).
Settings named like an `EngineConfig` field reach the engine as that field, and every option of
every model family in the family table becomes a setting `<family>_<option>` (for example
`OASR_WENET_CTC_WEIGHT`), generated from the family's options dataclass: nothing is copied by hand.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import json
import textwrap
import typing
from typing import Annotated, Any, Literal

from pydantic import Field, create_model, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from engine.config import EngineConfig
from engine.families import FAMILY_TABLE, load_family

ENGINE_FIELD_FOR = {"preferred_batch_sizes": "preferred_batch_size", "model_revision": "revision"}
"""Settings whose name differs from the EngineConfig field they set (the design's CLI spelling)."""

SERVER_SETTING_GROUPS: tuple[tuple[str, str], ...] = (
    ("listeners", "host"),
    ("model", "model"),
    ("device and runtime", "device"),
    ("batching and scheduling", "service_mode"),
    ("streaming state and KV memory", "chunk_size"),
    ("limits", "max_audio_mib"),
    ("voice activity (server VAD)", "vad"),
    ("batch jobs (speech:longrunningrecognize)", "data_dir"),
    ("security and extras", "api_key"),
    ("deprecated aliases", "stream_step_ms"),
)
"""(title, first setting) of each group of `ServerSettings`, in declaration order: a group runs to
the next one's first setting. `oasr serve --help` and docs/configuration.md show these groups,
then one group per model family (app/settings_doc.py)."""


class ServerSettings(BaseSettings):
    """The server's own settings; `Settings` adds the generated family options."""

    model_config = SettingsConfigDict(env_prefix="OASR_", extra="ignore", use_attribute_docstrings=True)

    # ---- listeners ----
    host: str = "0.0.0.0"
    """Address the HTTP and gRPC listeners bind to (used by `oasr serve`; uvicorn's own --host wins when run directly)."""
    port: int = 8000
    """HTTP port (used by `oasr serve`)."""
    grpc_port: int = 50051
    """gRPC port on the same host as HTTP; 0 disables the gRPC listener."""

    # ---- model ----
    model: str | None = None
    """Model to serve: an alias (tiny.en ... large-v3-turbo, distil-large-v3), a Hugging Face repo id (Systran/faster-whisper-small, nvidia/parakeet-tdt-0.6b-v2; optionally @revision) downloaded into the Hugging Face cache at start-up, or a directory; unset serves the embedded Whisper tiny.en."""
    models: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Several models to serve, comma-separated or a JSON list; each is a name as --model takes it (tiny.en is the embedded one), optionally `ID=NAME` to give it another id. Each gets its own engine; a request's `model` picks one (none, or an OpenAI default name such as whisper-1: the first, which loads at start). The others load on first use. Unset serves --model alone."""
    model_ttl_secs: float = -1.0
    """With several models: seconds a loaded model may go without requests before it is unloaded (it loads again on its next request); -1 never."""
    models_memory_budget_mb: float = 0.0
    """With several models: most MiB loaded at once, each model's weights (their files on disk) plus its planned KV pool; loading another first unloads the least recently used idle ones, and one that cannot fit beside models in use is refused (503 RESOURCE_EXHAUSTED). 0: no budget."""
    model_revision: str | None = None
    """Hub revision (branch, tag or commit) of --model; a commit pins it exactly. Unset is the repo's default branch."""
    ckpt_dir: str | None = None
    """Checkpoint directory (or a model name, as --model); unset serves --model, else the embedded Whisper tiny.en."""
    checkpoint_name: str | None = None
    """File inside ckpt_dir to load (e.g. model.nemo, final.pt); unset lets the model family pick its usual file."""
    decode_method: str | None = None
    """Decoder among those the model offers (see /v1/models `decode_methods`, e.g. ctc or rnnt); unset is the model's default."""
    served_model_name: str | None = None
    """Model name clients must send; unset accepts any `model` value (OpenAI SDKs always send one)."""

    # ---- device and runtime ----
    device: str = "auto"
    """'auto' (cuda when available, else cpu), 'cpu', 'cuda', 'cuda:1', ..."""
    dtype: str = "auto"
    """'auto' (float16 on cuda, float32 on cpu), 'float32', 'float16', 'bfloat16'."""
    quantization: Literal["auto", "none", "int8_w8a8", "fp16", "bf16"] = "auto"
    """Weight quantization: int8_w8a8 (int8 linears, CPU), fp16/bf16 (CUDA), none; 'auto' is int8_w8a8 on CPUs with int8 dot products (avx512_vnni, avx_vnni, amx_int8 flags) whose int8 GEMM is exact, else none (Whisper under 'auto' on amx_bf16 CPUs also attends in bfloat16 in its encoder; an explicit int8_w8a8 is the same on every x86 CPU); decided from the CPU, never a timing (see /v1/models quantization_reason)."""
    quantization_option: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    """Quantization object options as KEY=VALUE, folded with --quantization into one object: ignore=GLOB,... keeps module paths in full precision (e.g. ignore=decoder.*), module_types=linear,pointwise_conv picks layer kinds. Repeat the flag; separate entries with ';' in the env var."""
    num_threads: int | None = None
    """torch CPU threads; unset uses all cores."""
    gc_freeze: bool = True
    """Freeze the Python heap after the engine is built so full garbage collections skip it (a full collection of the built heap pauses every stream: engine/gc_freeze.py)."""

    # ---- batching and scheduling ----
    service_mode: Literal["offline", "streaming"] = "offline"
    """'streaming' decodes live streams incrementally (partials); 'offline' buffers streams to their end."""
    max_batch_size: int = 16
    """Most requests decoded together in one batch."""
    max_decode_rows: int = 64
    """Whisper: most decoder rows (beams × requests, live passes included) stepped together; bounds the KV cache."""
    schedule_policy: Literal["fcfs", "window", "bucket", "sjf"] = "window"
    """Offline admission: 'window' groups similar lengths around the oldest request, 'bucket' admits the fullest octave of length, 'sjf' the shortest first, 'fcfs' arrival order."""
    max_wait_time: float = 2.0
    """Seconds a request may be passed over (length grouping, stream cohorts, preferred-size holds) before it is admitted first."""
    length_window_factor: float = 2.0
    """'window' policy looks at the oldest max_batch_size × this many waiting requests."""
    max_offline_pad_ratio: float = 4.0
    """Cap on padded/useful audio length in one offline batch (window, bucket, sjf)."""
    length_bucket_ratio: float = 0.0
    """Floor on shortest/longest audio length in one offline batch, 0 to 1 (window, bucket, sjf); 0 is no floor."""
    preferred_batch_sizes: Annotated[list[int], NoDecode] = Field(default_factory=list)
    """Batch sizes admission snaps to (comma-separated, each <= max_batch_size); requests are held until one fills or the oldest waited max_wait_time. Unset admits whatever waits."""
    streaming_cohort_admit: bool = True
    """Admit waiting live streams shortest buffered audio first (streams that waited max_wait_time go first)."""

    # ---- streaming state and KV memory ----
    chunk_size: int = 16
    """Cache-aware streaming models: encoder frames per chunk."""
    num_left_chunks: int = -1
    """Cache-aware streaming models: left-context chunks (-1 unlimited)."""
    max_num_blocks: int | None = None
    """Cache-aware streaming models: KV blocks in the pool (unset: derived from memory)."""
    cpu_cache_bytes: int = 256 * 1024 * 1024
    """Cache-aware streaming models on CPU: KV pool byte budget when max_num_blocks is unset."""
    gpu_memory_utilization: float = 0.9
    """Paged KV pools on CUDA: share of the device an engine may occupy in total; its pool gets that, less what is resident and an activation reserve."""

    # ---- limits ----
    max_audio_mib: float = 25.0
    """Largest request body (HTTP upload, gRPC message) in MiB; larger gets 413 / RESOURCE_EXHAUSTED."""
    max_audio_seconds: float = 3600.0
    """Longest decoded audio per request in seconds; longer gets 413."""
    request_timeout_secs: float = 600.0
    """Seconds an offline request may take end to end; then 408 / DEADLINE_EXCEEDED and it is aborted."""
    upload_timeout_secs: float = 120.0
    """Seconds an HTTP request body may take to arrive in full; then 408 and the connection is closed (25 MiB over a 2 Mbit/s uplink takes ~105 s). 0 disables."""
    max_inflight: int = 64
    """Requests and live sessions in flight at once; more get 503 / RESOURCE_EXHAUSTED (probes and metrics exempt)."""
    max_queue_delay_secs: float = 30.0
    """New offline work (REST, gRPC Recognize) is refused with 503 RESOURCE_EXHAUSTED and a Retry-After while
    the backlog ahead of it (audio-seconds over the measured transcription rate) would queue it longer than
    this; batch jobs wait instead of starting, and admitted live sessions are never shed (docs/operations.md,
    overload). 0 disables the check."""
    max_concurrent_decodes: int = 2
    """Audio files decoded at once (worker threads); further uploads queue."""
    shutdown_grace_secs: float = 20.0
    """On SIGTERM, seconds in-flight work may finish before it is cancelled with 503 / UNAVAILABLE."""
    stream_idle_timeout_secs: float = 60.0
    """A live session without audio or events for this many seconds is closed."""
    max_stream_frame_kib: int = 1024
    """Largest WebSocket message accepted from a live client (/v1/realtime, /v1/listen), in KiB."""
    realtime_resume_grace_secs: float = 30.0
    """A /v1/realtime session whose client dropped is kept (engine stream included) this many seconds for it to resume; 0 disables resuming."""

    # ---- voice activity ----
    vad: Literal["silero", "energy"] = "silero"
    """Voice-activity model for server VAD: 'silero' (neural, shipped) or 'energy' (no model)."""
    vad_threshold: float = 0.5
    """Speech probability above which a frame counts as speech."""
    vad_silence_duration_ms: int = 500
    """Silence after speech that ends a turn, in ms."""
    vad_prefix_padding_ms: int = 300
    """Audio kept before detected speech start, in ms."""

    # ---- batch jobs ----
    data_dir: str | None = None
    """Where the server keeps its state (jobs database, audio spool); unset: the user data dir (~/.local/share/oasr on Linux)."""
    jobs_database_url: str | None = None
    """Jobs store: unset is SQLite in data_dir; postgresql://user:password@host/db lets several replicas share one queue."""
    jobs_spool_dir: str | None = None
    """Uploaded audio of jobs; unset: <data_dir>/spool. Replicas sharing a database must share this directory too."""
    jobs_spool_max_mib: float = 10240.0
    """All spooled job audio together, in MiB; a submission past it gets 429 / RESOURCE_EXHAUSTED."""
    jobs_retention_hours: float = 168.0
    """Finished jobs, their results and their audio are deleted this many hours after they finished."""
    jobs_max_running: int = 2
    """Jobs this replica runs at once (a per-channel job is one engine request per channel); 0 runs none here."""
    jobs_priority: int = 10
    """Engine priority of job requests; live and synchronous requests have 0 and lower runs sooner, so jobs yield."""
    jobs_lease_secs: float = 60.0
    """Lease of a running job, renewed every third of it; jobs of a replica that died are taken over after it."""
    jobs_replica_id: str | None = None
    """This replica's name in the jobs store (lease owner, attempt history); unset: a random id per process."""
    jobs_poll_interval_secs: float = 1.0
    """How often a replica looks for queued jobs and due webhooks (jobs submitted to it start at once)."""
    audio_uri_root: str | None = None
    """Directory that audio.uri file:// paths must lie under (symlinks resolved); unset refuses audio.uri."""
    callback_allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Hosts job callback URLs may name (comma-separated; *.example.com matches subdomains); unset refuses callbacks."""
    webhook_max_attempts: int = 5
    """Deliveries tried per finished job before its webhook is marked FAILED."""
    webhook_backoff_secs: float = 5.0
    """Wait before the second delivery attempt, in seconds; doubled before each further one."""
    webhook_timeout_secs: float = 10.0
    """Seconds a webhook receiver has to answer one delivery attempt."""

    # ---- security and extras ----
    api_key: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """API keys (comma-separated in the env var); when set every route except probes needs one (Bearer or x-api-key)."""
    cors_allow_origin: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Origins allowed by CORS (comma-separated); unset disables CORS."""
    demo: bool = False
    """Serve the browser demo page at /demo."""
    log_level: str = "info"
    """Python logging level for the oasr loggers."""

    # ---- deprecated aliases ----
    stream_step_ms: int | None = None
    """Deprecated alias of OASR_WHISPER_STREAM_STEP_MS (kept one release; setting it logs a warning)."""
    stream_encoder_context: Literal["fit", "full"] | None = None
    """Deprecated alias of OASR_WHISPER_STREAM_ENCODER_CONTEXT (kept one release; setting it logs a warning)."""
    recycle_streaming_history: bool | None = None
    """Deprecated alias of OASR_WENET_RECYCLE_STREAMING_HISTORY (kept one release; setting it logs a warning)."""

    @field_validator("api_key", "cors_allow_origin", "preferred_batch_sizes", "callback_allowed_hosts", mode="before")
    @classmethod
    def _split_commas(cls, value: object) -> object:
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return value

    @field_validator("models", mode="before")
    @classmethod
    def _split_models(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().startswith("["):
            return json.loads(value)
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return value

    @model_validator(mode="after")
    def _one_way_to_name_models(self) -> ServerSettings:
        if self.models and (self.model is not None or self.ckpt_dir is not None):
            raise ValueError("models lists every model to serve: leave model and ckpt_dir unset with it")
        return self

    @field_validator("quantization_option", mode="before")
    @classmethod
    def _split_key_values(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        options: dict[str, str] = {}
        for entry in filter(None, (e.strip() for e in value.split(";"))):
            key, sep, option = entry.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"expected KEY=VALUE, got {entry!r}")
            options[key.strip()] = option.strip()
        return options

    def engine_config(self) -> EngineConfig:
        """The engine's configuration: every setting named like an EngineConfig field (or renamed
        in `ENGINE_FIELD_FOR`), and the family options (`<family>_<option>` settings) by family."""
        fields = type(self).model_fields
        setting_for = {engine: setting for setting, engine in ENGINE_FIELD_FOR.items()}
        values = {}
        for f in dataclasses.fields(EngineConfig):
            setting = setting_for.get(f.name, f.name)
            if setting in fields:
                value = getattr(self, setting)
                values[f.name] = tuple(value) if isinstance(value, list) else value
        # only the family options given (env, .env, arguments): the rest are the family's defaults,
        # and a deprecated EngineConfig alias still applies where its new name was not given
        options = {
            name: {option: getattr(self, setting) for setting, option in settings.items()
                   if setting in self.model_fields_set}
            for name, settings in family_setting_names().items()
        }
        if self.model is not None:
            if self.ckpt_dir is not None and self.ckpt_dir != self.model:
                raise ValueError(f"model={self.model!r} and ckpt_dir={self.ckpt_dir!r} both name the model; set one")
            values["ckpt_dir"] = self.model
        if self.quantization_option:  # the reference design's one quantization object
            values["quantization"] = {"scheme": self.quantization, **self.quantization_option}
        return EngineConfig(**values, family_options=options)

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_audio_mib * 1024 * 1024)


def _attribute_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass (the convention every options class follows)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def _is_tuple(annotation: Any) -> bool:
    """`tuple[...]`, possibly optional."""
    return any(typing.get_origin(a) is tuple for a in (annotation, *typing.get_args(annotation)))


def _family_option_fields() -> dict[str, Any]:
    """`<family>_<option>` settings, one per field of each family's options dataclass. A tuple
    option is written comma-separated, like the server's other lists (`OASR_NEMO_STREAM_CONTEXT=10,2,2`)."""
    fields: dict[str, Any] = {}
    for entry in FAMILY_TABLE:
        options = load_family(entry.name).options
        hints, docs = typing.get_type_hints(options), _attribute_docs(options)
        for f in dataclasses.fields(options):
            kind = Annotated[hints[f.name], NoDecode] if _is_tuple(hints[f.name]) else hints[f.name]
            fields[f"{entry.name}_{f.name}"] = (kind, Field(default=f.default, description=docs.get(f.name, "")))
    return fields


def _split_tuple_options(value: object) -> object:
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip()) or None
    return value


def family_setting_names() -> dict[str, dict[str, str]]:
    """{family: {setting name: option name}} for the generated settings."""
    return {
        entry.name: {f"{entry.name}_{f.name}": f.name for f in dataclasses.fields(load_family(entry.name).options)}
        for entry in FAMILY_TABLE
    }


_FAMILY_OPTION_FIELDS = _family_option_fields()
_TUPLE_OPTIONS = [name for name, (kind, _) in _FAMILY_OPTION_FIELDS.items()
                  if typing.get_origin(kind) is Annotated]  # the tuple options, wrapped with NoDecode
Settings = create_model(  # type: ignore[call-overload]
    "Settings", __base__=ServerSettings, __module__=__name__,
    __validators__={"_split_tuple_options": field_validator(*_TUPLE_OPTIONS, mode="before")(_split_tuple_options)}
    if _TUPLE_OPTIONS else {},
    **_FAMILY_OPTION_FIELDS,
)
Settings.__doc__ = "Server settings, including every model family's options (see the module docstring)."
