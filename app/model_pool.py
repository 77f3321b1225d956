"""The models a server serves, by name: each loaded one is an `EngineService` of its own (its own
engine, command queue and engine thread), loaded on first use and unloaded when idle.

`ModelPool` owns name -> service. Every surface asks it for the service of a request's `model`
(`service_for`): the name is checked by app/requests.py (`pick_model`: none, or the default name
an OpenAI SDK sends, is the first model), a model not loaded is loaded under one lock (two first
requests load it once), and the service is returned pinned until the caller's synchronous
continuation ran, so it takes its inflight permit or opens its request before anything can
unload the model.

Unloading (only with several models, `OASR_MODELS`): a model idle for `model_ttl_secs` is
unloaded by the sweeper, and loading a model whose memory would take the loaded ones over
`models_memory_budget_mb` first unloads the least recently used idle ones. A model is idle when
its service has no permit taken, no request open and no pin: a model with requests in flight is
never unloaded. A model's memory is its weights, estimated from its weight files on disk (as
speaches does: cheap, known before loading, and what a float32 load occupies to within the
quantization factor), plus the paged KV pool its engine planned at load (`kv_pool_bytes` of its
card, engine/cache/block_pool.py; known from its last load before the next). A load that does
not fit beside models with requests in flight is refused, 503 RESOURCE_EXHAUSTED (retryable), as
is one whose pool the device's memory cannot hold: the least recently used idle model is
unloaded first and the load tried again.

One event loop owns the pool (no thread touches it), so its bookkeeping needs no lock; the
`asyncio.Lock` only serialises loads and unloads, which await a worker thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from app.engine_service import EngineService
from app.metrics import Metrics
from app.passing_thread import in_passing_thread
from app.requests import pick_model
from engine import ASREngine
from engine.admission import describe_model, described_card
from engine.config import EngineConfig
from engine.errors import EngineError, EngineOverloadedError, EngineShutdownError
from engine.hub import cached_checkpoint_dir, checkpoint_dir
from engine.memory import MIB

logger = logging.getLogger(__name__)

EMBEDDED_NAME = "tiny.en"
"""`OASR_MODELS` entry that means the embedded checkpoint (no network), as an unset --model does."""
WEIGHT_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".safetensors", ".nemo", ".onnx", ".npz", ".gguf")
"""Files counted as weights when a model's size is estimated (tokenizers and configs are not)."""
MIN_SWEEP_S = 0.05
MAX_SWEEP_S = 10.0
"""The TTL sweeper looks every quarter TTL, within these bounds (seconds): a model is unloaded at
most a quarter TTL late, and a long TTL costs a wake-up every 10 s."""

ModelState = Literal["unloaded", "loading", "loaded", "unloading", "failed"]


@dataclass(frozen=True)
class ModelSpec:
    """One served model: the name clients send and what loads it."""

    name: str
    """The id in /v1/models and in a request's `model`."""
    config: EngineConfig
    """The engine's configuration (ckpt_dir: a directory, a model name, or None for the embedded one)."""

    @property
    def source(self) -> str:
        return self.config.ckpt_dir or EMBEDDED_NAME


def parse_model_entry(entry: str) -> tuple[str, str | None]:
    """'ID=SOURCE' or 'SOURCE' -> (id, source); the embedded model's source is None."""
    name, sep, source = entry.partition("=")
    if not sep:
        name = source = entry
    name, source = name.strip(), source.strip()
    if not name or not source:
        raise ValueError(f"models entry {entry!r}: expected NAME, or ID=NAME with both parts")
    return name, (None if source == EMBEDDED_NAME else source)


def model_specs(entries: list[str], base: EngineConfig) -> list[ModelSpec]:
    """`OASR_MODELS` entries -> specs sharing every other engine setting of `base`;
    InvalidRequestError for an entry that names no directory and no model."""
    specs: list[ModelSpec] = []
    for entry in entries:
        name, source = parse_model_entry(entry)
        if any(s.name == name for s in specs):
            raise ValueError(f"models: {name!r} is listed twice")
        config = dataclasses.replace(base, ckpt_dir=source)
        config.validate()  # a path that is not a directory nor a model name fails the start, not its first request
        specs.append(ModelSpec(name, config))
    return specs


def weight_bytes(ckpt_dir: str) -> int:
    """Bytes of the weight files under `ckpt_dir` (the model's size estimate)."""
    total = 0
    for root, _, files in os.walk(ckpt_dir):
        for name in files:
            if name.endswith(WEIGHT_SUFFIXES):
                total += os.path.getsize(os.path.join(root, name))
    return total


@dataclass(eq=False)
class PooledModel:
    """One configured model and, while loaded, its service. Event-loop state only."""

    spec: ModelSpec
    index: int
    """Position in the configured list: the engine's `engine` metric label."""
    service: EngineService | None = None
    state: ModelState = "unloaded"
    last_used: float = field(default_factory=time.monotonic)
    """Monotonic time of its last request, or of the last sweep that found it busy."""
    size_bytes: int | None = None
    """Weight bytes on disk, once its checkpoint is local."""
    pool_bytes: int = 0
    """Its paged KV pool as its engine planned it at its last load (0: none, or not loaded yet)."""
    card: dict[str, Any] | None = None
    """Its /v1/models card from its last load (kept while unloaded), or before its first load the
    one its checkpoint's configuration describes (`described: true`); None when neither is known
    (a model name not in the cache, a checkpoint no family recognises)."""
    error: str | None = None
    """Why its last load failed."""
    pins: int = 0
    loads: int = 0

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def memory_bytes(self) -> int:
        """What it holds loaded, as the budget counts it: weights plus its planned KV pool."""
        return (self.size_bytes or 0) + self.pool_bytes

    @property
    def idle(self) -> bool:
        """Loaded, and nothing holds it: no pin, no permit, no open request."""
        s = self.service
        return self.state == "loaded" and s is not None and self.pins == 0 and not s.busy


ServiceFactory = Callable[[ASREngine, PooledModel], EngineService]
EngineFactory = Callable[[EngineConfig], ASREngine]


class ModelPool:
    """name -> EngineService for every configured model; see the module docstring."""

    def __init__(self, specs: list[ModelSpec], metrics: Metrics, make_service: ServiceFactory, *,
                 served_model_name: str | None = None, several: bool | None = None, ttl_s: float = -1.0,
                 budget_bytes: int = 0, make_engine: EngineFactory = ASREngine):
        if not specs:
            raise ValueError("a model pool needs at least one model")
        self.models = [PooledModel(spec, i) for i, spec in enumerate(specs)]
        self.metrics = metrics
        self.served_model_name = served_model_name
        self.several = len(specs) > 1 if several is None else several
        """Several models configured (`OASR_MODELS`): names are checked against the list, and idle
        models unload. One model (`OASR_MODEL`) behaves as a single-model server always did."""
        self.ttl_s = ttl_s if self.several else -1.0
        self.budget_bytes = budget_bytes if self.several else 0
        self._make_service = make_service
        self._make_engine = make_engine
        self._lock = asyncio.Lock()
        self._sweeper: asyncio.Task[None] | None = None
        self.closing = False
        self.on_death: Callable[[str], None] | None = None
        """Called when any model's engine thread died (the server drains and exits: app/main.py)."""
        self.death: str | None = None

    @classmethod
    def serving(cls, service: EngineService, name: str | None = None,
                served_model_name: str | None = None) -> ModelPool:
        """A single-model pool around a service already started (embedded use, route tests)."""
        info = service.engine.model_info
        spec = ModelSpec(name or served_model_name or info.model, service.engine.config)
        pool = cls([spec], service.metrics, lambda engine, entry: service, served_model_name=served_model_name)
        entry = pool.default
        entry.service, entry.state, entry.card = service, "loaded", service.engine.info()
        return pool

    # ------------------------------------------------------------------ names

    @property
    def default(self) -> PooledModel:
        return self.models[0]

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.models]

    def resolve(self, model: str | None) -> PooledModel:
        """The configured model a request's `model` names; ModelNotFound (app/errors.py) otherwise."""
        if not self.several:  # its configured name, the checkpoint's name /v1/models lists, its family
            names = [self.default.name]
            if self.default.service is not None:
                info = self.default.service.engine.model_info
                names += [info.model, info.family]
            pick_model(names, model, served_model_name=self.served_model_name)
            return self.default
        name = pick_model(self.names, model, served_model_name=self.served_model_name)
        return next(m for m in self.models if m.name == name)

    # ------------------------------------------------------------------ use

    async def service_for(self, model: str | None) -> EngineService:
        """The loaded service of the model `model` names (loading it first if needed), pinned
        until the caller's next await: take its permit or open its request before awaiting."""
        entry = self.resolve(model)
        entry.last_used = time.monotonic()
        service = entry.service if entry.state == "loaded" else None
        if service is None:
            service = await self._load(entry)
        entry.pins += 1
        asyncio.get_running_loop().call_soon(self._unpin, entry)
        return service

    def _unpin(self, entry: PooledModel) -> None:
        entry.pins -= 1

    @property
    def default_service(self) -> EngineService | None:
        """The first model's service while it is loaded."""
        return self.default.service

    def loaded(self) -> Iterator[EngineService]:
        for m in self.models:
            if m.service is not None:
                yield m.service

    @property
    def inflight(self) -> int:
        return sum(s.admission.inflight for s in self.loaded())

    @property
    def draining(self) -> bool:
        return self.closing

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> EngineService:
        """Load the first model (readiness means it can serve), describe the others from their
        checkpoints' configuration (so /v1/models lists what each can do before its first load),
        and start the TTL sweeper."""
        service = await self._load(self.default)
        for entry in self.models:
            if entry.card is None:
                await asyncio.to_thread(self._describe, entry)
        if self.ttl_s >= 0:
            self._sweeper = asyncio.ensure_future(self._sweep_loop())
        return service

    def drain(self) -> None:
        """Shutdown begins: every loaded service refuses new work, and nothing loads any more."""
        self.closing = True
        for s in self.loaded():
            s.admission.draining = True

    async def cancel_all(self, reason: str) -> None:
        for s in list(self.loaded()):
            await s.cancel_all(reason)

    async def close(self) -> None:
        """Stop the sweeper and every loaded engine."""
        self.closing = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        for entry in self.models:
            if entry.service is not None:
                await asyncio.to_thread(entry.service.stop)
                entry.service, entry.state = None, "unloaded"

    # ------------------------------------------------------------------ loading

    async def _load(self, entry: PooledModel) -> EngineService:
        async with self._lock:
            if entry.state == "loaded" and entry.service is not None:  # a request ahead of us loaded it
                return entry.service
            if self.closing:
                raise EngineShutdownError(f"server is shutting down; model {entry.name!r} is not loaded")
            entry.state = "loading"
            try:
                service = await self._build(entry)
            except BaseException as exc:
                # refused for room (retryable) leaves it unloaded; anything else is a failed load
                entry.state = "unloaded" if isinstance(exc, EngineOverloadedError) else "failed"
                entry.error = f"{type(exc).__name__}: {exc}"
                logger.error("model %s was not loaded: %s", entry.name, entry.error)
                raise
            entry.service, entry.state, entry.error = service, "loaded", None
            service.admission.draining = self.closing  # the drain began while it loaded: it takes no new work
            entry.loads += 1
            entry.last_used = time.monotonic()
            self.metrics.model_loads.labels(model=entry.name).inc()
            self.metrics.model_loaded.labels(model=entry.name).set(1)
            return service

    async def _build(self, entry: PooledModel) -> EngineService:
        """Under the lock: make the checkpoint local, make room under the budget for what it held
        last time, build the engine (its KV pool is planned from the device's memory now), make
        room for what it holds now, then start and check it."""
        started = time.monotonic()
        config = entry.spec.config
        config.validate()  # before any download
        local = await asyncio.to_thread(checkpoint_dir, config.ckpt_dir, config.revision)  # a name: downloaded
        config = dataclasses.replace(config, ckpt_dir=local)
        entry.size_bytes = weight_bytes(config.resolved_ckpt_dir())
        await self._make_room(entry)
        engine = await self._make_engine_with_room(entry, config)
        try:
            entry.pool_bytes = int(engine.info().get("kv_pool_bytes") or 0)
            await self._make_room(entry)  # its planned pool is known now: refused if it does not fit
            service = self._make_service(engine, entry)
        except BaseException:
            await asyncio.to_thread(engine.shutdown)
            raise
        service.on_death = self._died
        service.start()
        await service.wait_started()
        if service.death is not None:  # its first step raised: it can serve nothing
            await asyncio.to_thread(service.stop)
            raise EngineError(f"model {entry.name!r}: {service.death}")
        entry.card = engine.info()
        logger.info("model %s loaded in %.1f s (%.0f MiB of weights, %.0f MiB of KV pool)", entry.name,
                    time.monotonic() - started, entry.size_bytes / MIB, entry.pool_bytes / MIB)
        return service

    async def _make_engine_with_room(self, entry: PooledModel, config: EngineConfig) -> ASREngine:
        """Build the engine; when the device's memory cannot hold its KV pool (EngineOverloadedError
        from the pool's plan), unload the least recently used idle model and try again."""
        while True:
            try:
                return await in_passing_thread(lambda: self._make_engine(config))
            except EngineOverloadedError:
                victim = self._least_recently_used(entry)
                if victim is None:
                    raise
                await self._unload(victim, "memory_budget")

    def _least_recently_used(self, entry: PooledModel) -> PooledModel | None:
        """The idle loaded model other than `entry` used longest ago, if any."""
        idle = [m for m in self.models if m is not entry and m.service is not None and m.idle]
        return min(idle, key=lambda m: m.last_used, default=None)

    def _describe(self, entry: PooledModel) -> None:
        """Fill `entry`'s card from its checkpoint's configuration, with no download and no weights
        read (a worker thread; a load that lands meanwhile keeps its own card). A model that cannot
        be described yet keeps none: its first load says what it is, or why it is not."""
        config = entry.spec.config
        try:
            local = dataclasses.replace(config, ckpt_dir=cached_checkpoint_dir(config.ckpt_dir, config.revision))
            info = describe_model(local)
            size = weight_bytes(local.resolved_ckpt_dir())
        except (EngineError, OSError) as exc:
            logger.info("model %s is not described before its first load: %s", entry.name, exc)
            return
        if info is not None and entry.card is None:
            entry.card = described_card(info, service_mode=config.service_mode)
            entry.size_bytes = entry.size_bytes or size

    def _died(self, reason: str) -> None:
        self.death = self.death or reason
        if self.on_death is not None:
            self.on_death(reason)

    async def _make_room(self, entry: PooledModel) -> None:
        """Unload least recently used idle models until `entry` (weights and KV pool) fits the
        budget. A budget taken by models with requests in flight refuses the load (503
        RESOURCE_EXHAUSTED, retryable): unloading them would fail their requests. A model larger
        than the whole budget still loads when it is alone."""
        if self.budget_bytes <= 0:
            return
        need = entry.memory_bytes
        while True:
            others = [m for m in self.models if m is not entry and m.service is not None]
            held = sum(m.memory_bytes for m in others)
            if held + need <= self.budget_bytes or not others:
                return
            victim = self._least_recently_used(entry)
            if victim is None:
                raise EngineOverloadedError(
                    f"model {entry.name!r} ({(entry.size_bytes or 0) / MIB:.1f} MiB of weights + "
                    f"{entry.pool_bytes / MIB:.1f} MiB of KV pool) does not fit the models memory budget "
                    f"({self.budget_bytes / MIB:.1f} MiB) beside {held / MIB:.1f} MiB held by models with "
                    "requests in flight; retry later")
            await self._unload(victim, "memory_budget")

    async def _unload(self, entry: PooledModel, reason: str) -> None:
        """Under the lock: stop an idle model's engine (its thread ends, its memory is freed)."""
        service = entry.service
        if service is None:
            return
        entry.service, entry.state = None, "unloading"  # new requests now wait on the lock and reload it
        service.admission.draining = True
        await asyncio.to_thread(service.stop)
        entry.state = "unloaded"
        self.metrics.model_unloads.labels(model=entry.name, reason=reason).inc()
        self.metrics.model_loaded.labels(model=entry.name).set(0)
        logger.info("model %s unloaded (%s)", entry.name, reason)

    async def _sweep_loop(self) -> None:
        interval = min(max(self.ttl_s / 4, MIN_SWEEP_S), MAX_SWEEP_S)
        while not self.closing:
            await asyncio.sleep(interval)
            await self.sweep()

    async def sweep(self) -> None:
        """Unload every model idle for the TTL; a busy one counts as used now."""
        now = time.monotonic()
        for entry in self.models:
            if entry.service is not None and not entry.idle:
                entry.last_used = now
        expired = [m for m in self.models if m.idle and now - m.last_used >= self.ttl_s]
        if not expired:
            return
        async with self._lock:
            for entry in expired:
                if entry.idle and time.monotonic() - entry.last_used >= self.ttl_s:  # still, after the wait
                    await self._unload(entry, "idle_ttl")

    # ------------------------------------------------------------------ reporting

    def readiness(self) -> dict[str, Any]:
        """/readyz: the first model's readiness (ready when it can serve: loaded and stepping, or
        unloaded and loadable), and with several models each one's state."""
        default = self.default
        if default.service is not None:
            body = default.service.readiness()
        else:
            body = {"ready": not self.closing and default.state != "failed", "draining": self.closing,
                    "engine_died": self.death}
        if self.death is not None:
            body["ready"], body["engine_died"] = False, self.death
        if self.several:
            body["models"] = {m.name: self._model_readiness(m) for m in self.models}
        return body

    @property
    def ready(self) -> bool:
        return bool(self.readiness()["ready"])

    def _model_readiness(self, entry: PooledModel) -> dict[str, Any]:
        detail: dict[str, Any] = {"state": entry.state}
        if entry.service is not None:
            r = entry.service.readiness()
            detail.update(ready=r["ready"], inflight=r["inflight"], running=r["running"], waiting=r["waiting"])
        if entry.error is not None:
            detail["error"] = entry.error
        return detail

    def cards(self) -> list[dict[str, Any]]:
        """/v1/models entries of the configured models (several): each with its state and its
        card (`PooledModel.card`: from its last load, or described before the first)."""
        return [{"id": m.name, "loaded": m.state == "loaded", "state": m.state, "info": m.card,
                 "size_mib": None if m.size_bytes is None else round(m.size_bytes / MIB, 1),
                 "memory_mib": None if m.size_bytes is None else round(m.memory_bytes / MIB, 1)}
                for m in self.models]


__all__ = ["EMBEDDED_NAME", "ModelPool", "ModelSpec", "PooledModel", "model_specs", "parse_model_entry",
           "weight_bytes"]
