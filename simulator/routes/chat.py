"""The generation endpoints: ``POST /v1/chat/completions`` (non-streaming) and
``POST /abort_request``.

Mirrored from SGLang 0.5.20 / 0.5.23 (paths under ``python/sglang/srt/``), never kinder:

* No 503 for load unless ``profile.max_queued_requests`` is set (``managers/scheduler.py``
  ``_abort_on_queued_limit``: 503 "The request queue is full.", error ``type`` "503").
* 400 for a prompt that does not fit the context (:func:`simulator.chat_request.context_error`)
  or a duplicate in-flight ``rid``.
* ``/abort_request`` and client disconnects abort as :mod:`simulator.inflight` says. An aborted
  request answers 200 with ``finish_reason: "abort"``; one aborted while waiting has no tokens.
* A waiting handler checks for a disconnect every ``profile.disconnect_poll_s``.

Every chat response carries two headers SGLang does not send: ``X-Simulator-Queue-Seconds`` and
``X-Simulator-E2E-Seconds`` (simulated seconds spent waiting for a slot and in total).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING

from aiohttp import web

from simulator.answers import error_response
from simulator.chat_request import BadRequest, ChatRequest, parse_chat
from simulator.engine import Job
from simulator.output import OutputPlan, estimate_prompt_tokens, plan_output, request_seed
from simulator.routes.personas import Dialect

if TYPE_CHECKING:
    from simulator.server import SimulatedServer

__all__ = ["ChatRoutes"]


class ChatRoutes:
    """The handlers of the generation endpoints for ``server``, answering in ``dialect``
    (SGLang's by default; :mod:`simulator.routes.personas`)."""

    def __init__(self, server: SimulatedServer, dialect: Dialect | None = None) -> None:
        self.server = server
        self.dialect = dialect if dialect is not None else Dialect()

    def register(self, router: web.UrlDispatcher) -> None:
        """Add this family's routes to ``router`` (``/abort_request``: SGLang only)."""
        router.add_post("/v1/chat/completions", self.chat)
        if self.dialect.aborts_by_prefix:
            router.add_post("/abort_request", self.abort_request)

    async def abort_request(self, request: web.Request) -> web.Response:
        """``{"rid": ...}`` or ``{"abort_all": true}``; 200 whatever matched, 400 for a non-JSON body."""
        server = self.server
        try:
            body = await request.json()
        except ValueError:
            return error_response(400, "The request body must be JSON.")
        if not isinstance(body, dict):
            return web.Response(status=200)
        rid = body.get("rid")
        if body.get("abort_all") is True:
            server.telemetry.aborts_sent += 1
            server.inflight.abort_all(server.engine)
        elif isinstance(rid, str) and rid and server.inflight.abort_matching(rid, server.engine):
            server.telemetry.aborts_sent += 1
        return web.Response(status=200)

    def _reject(self, status: int, message: str) -> web.Response:
        self.server.telemetry.rejected += 1
        return self.dialect.error(status, message)

    async def chat(self, request: web.Request) -> web.Response:
        """A non-streaming chat completion: faults first, then validation, then the engine."""
        server = self.server
        engine = server.engine
        profile = server.profile
        control = server.fault_control
        if control.config.draining:
            return self._reject(503, "The server is shutting down.")
        if control.count_request():
            server.spawn_crash()
            await asyncio.Event().wait()  # never answered: the crash cancels this handler
        if control.take_503(engine.now()):
            return self._reject(503, "The server is overloaded (simulated 503 fault). Retry later.")
        dialect = self.dialect
        try:
            chat = parse_chat(await request.json(), profile, id_field=dialect.id_field)
        except (ValueError, BadRequest) as exc:
            server.telemetry.rejected += 1
            message = str(exc) if isinstance(exc, BadRequest) else "The request body must be valid JSON."
            return dialect.bad_body(message)
        refused = dialect.refusal(chat, profile, chat.rid is not None and chat.rid in server.inflight)
        if refused is not None:
            server.telemetry.rejected += 1
            return refused
        prompt_tokens = estimate_prompt_tokens(chat.messages, chat.tools)
        context = profile.context_length
        too_long = dialect.context_error(prompt_tokens, chat.max_tokens, context)
        if too_long is not None:
            return self._reject(400, too_long)
        limit = profile.max_queued_requests
        if limit is not None:
            engine.sync()
            if engine.queued + chat.n > limit:
                return self._reject(503, "The request queue is full.")
        cached_tokens = server.prefix_cache.cached_tokens(chat.messages, prompt_tokens)
        if chat.n > 1:
            return await self._parallel(request, chat, prompt_tokens, cached_tokens)

        faults = control.config
        plan = self._plan(chat, None, prompt_tokens)
        rid = chat.rid if chat.rid is not None else f"chatcmpl-{uuid.uuid4().hex}"
        answer_id = dialect.response_id(chat.rid, f"chatcmpl-{uuid.uuid4().hex}")
        job = self._submit(chat, plan, prompt_tokens)
        server.telemetry.admitted(prompt_tokens, cached_tokens)
        outcome = await self._run(job, request, rid)
        if outcome is not None:
            return outcome
        queued_abort = False
        if job.cancel_reason == "abort_request":
            # Aborted while waiting: the tokenizer answers with no tokens at all (SGLang 0.5.20
            # managers/tokenizer_manager.py _handle_abort_req: meta_info has no token counts).
            queued_abort = job.admitted_at is None
            plan = plan.truncated(job.tokens, "abort")
        headers = {
            "X-Simulator-Queue-Seconds": f"{job.queue_s:.6f}",
            "X-Simulator-E2E-Seconds": f"{(job.finished_at or job.submitted_at) - job.submitted_at:.6f}",
        }
        if queued_abort:
            prompt_tokens = cached_tokens = 0
        failed = self._injected_failure(plan)
        if failed is not None:
            return failed
        body = dialect.body(profile, answer_id, chat, plan, prompt_tokens, cached_tokens)
        if faults.omit_usage:
            body.pop("usage", None)
        return web.json_response(body, headers=headers)

    def _submit(
        self, chat: ChatRequest, plan: OutputPlan, prompt_tokens: int, *, cached_tokens: int = 0
    ) -> Job:
        """Queue the generation of ``plan`` in the engine (``cached_tokens``: not prefilled)."""
        return self.server.engine.submit(
            prompt_tokens=prompt_tokens,
            target_tokens=plan.completion_tokens,
            base_rate=plan.base_rate,
            ends_in_abort=plan.finish_reason == "abort",
            priority=chat.priority,
            cached_tokens=cached_tokens,
        )

    def _plan(
        self, chat: ChatRequest, rid: str | None, prompt_tokens: int, *, seed: int | None = None
    ) -> OutputPlan:
        """The output of one generation of ``chat`` (its faults drawn now); ``seed`` overrides
        the one drawn from ``rid``."""
        server = self.server
        profile = server.profile
        faults = server.fault_control.config
        abort_fraction = None
        if faults.abort_rate > 0 and server.rng.random() < faults.abort_rate:
            abort_fraction = server.rng.random()
        budget = (
            chat.max_tokens if chat.max_tokens is not None else profile.context_length - prompt_tokens - 1
        )
        return plan_output(
            profile,
            seed=request_seed(chat.rid if rid is None else rid, chat.messages, profile.seed)
            if seed is None
            else seed,
            enable_thinking=chat.enable_thinking,
            min_tokens=chat.min_tokens,
            budget=budget,
            tools=chat.tools if profile.tool_call_parser is not None else (),
            tool_choice=chat.tool_choice,
            faults=faults,
            abort_fraction=abort_fraction,
            json_schema=chat.json_schema,
            violate=chat.json_schema is not None and server.rng.random() < faults.structured_violation_rate,
        )

    async def _parallel(
        self, request: web.Request, chat: ChatRequest, prompt_tokens: int, cached_tokens: int
    ) -> web.Response:
        """A request with ``n`` over 1, as SGLang runs it (0.5.23 ``managers/tokenizer_manager.py``
        ``_handle_batch_request``): one request with ``max_new_tokens`` 0 prefills and caches the
        prompt, then ``n`` copies, each under a new random ``rid`` (so an ``/abort_request`` for the
        client's ``rid`` reaches none of them), decode from the cached prompt; the usage counts the
        prompt once and sums the completions (``entrypoints/openai/usage_processor.py``). With
        ``--enable-deterministic-inference`` every copy samples with the same seed: equal answers."""
        server = self.server
        engine = server.engine
        answer_id = self.dialect.response_id(chat.rid, f"chatcmpl-{uuid.uuid4().hex}")
        # like any request here, the prefill pays for the whole prompt: the simulator credits no cache
        warm = engine.submit(prompt_tokens=prompt_tokens, target_tokens=0, base_rate=1.0)
        server.telemetry.admitted(prompt_tokens, cached_tokens)
        outcome = await self._run(warm, request, uuid.uuid4().hex)
        if outcome is not None:
            return outcome
        copies: list[tuple[OutputPlan, Job]] = []
        same_seed = chat.seed if chat.seed is not None else 42
        for _ in range(chat.n):
            copy_rid = uuid.uuid4().hex
            seed = same_seed if server.profile.enable_deterministic_inference else None
            plan = self._plan(chat, copy_rid, prompt_tokens, seed=seed)
            # the whole prompt but its last token is in the cache
            job = self._submit(chat, plan, prompt_tokens, cached_tokens=prompt_tokens - 1)
            server.telemetry.admitted(prompt_tokens, prompt_tokens - 1)
            copies.append((plan, job))
        waits = [self._run(job, request, uuid.uuid4().hex) for _, job in copies]
        for outcome in await asyncio.gather(*waits):
            if outcome is not None:
                return outcome
        plans = [
            plan.truncated(job.tokens, "abort") if job.cancel_reason == "abort_request" else plan
            for plan, job in copies
        ]
        for plan in plans:
            failed = self._injected_failure(plan)
            if failed is not None:
                return failed
        bodies = [
            self.dialect.body(server.profile, answer_id, chat, plan, prompt_tokens, prompt_tokens - 1)
            for plan in plans
        ]
        body = bodies[0]
        body["choices"] = [dict(b["choices"][0], index=i) for i, b in enumerate(bodies)]
        body["usage"] = self.dialect.usage(
            server.profile, prompt_tokens=prompt_tokens, completions=bodies, cached=prompt_tokens - 1
        )
        if server.fault_control.config.omit_usage:
            body.pop("usage", None)
        first, last = copies[0][1], max((job for _, job in copies), key=lambda j: j.finished_at or 0.0)
        headers = {
            "X-Simulator-Queue-Seconds": f"{warm.queue_s + first.queue_s:.6f}",
            "X-Simulator-E2E-Seconds": f"{(last.finished_at or warm.submitted_at) - warm.submitted_at:.6f}",
        }
        return web.json_response(body, headers=headers)

    async def _run(self, job: Job, request: web.Request, rid: str) -> web.Response | None:
        """Wait for ``job`` registered under ``rid``; the answer to send instead of a result
        (a disconnect: 499, a shutdown: 503), or None once it ended."""
        server = self.server
        server.inflight.add(rid, job)
        try:
            disconnected = await self._wait(job, request, rid)
        finally:
            server.inflight.remove(rid, job)
            server.engine.cancel(job, "disconnect")  # no-op unless this handler was cancelled
        if disconnected:
            return web.Response(status=499)
        if job.cancel_reason == "shutdown":
            return self.dialect.error(503, "The server is shutting down.")
        return None

    def _injected_failure(self, plan: OutputPlan) -> web.Response | None:
        """The error answer a fault puts in place of a finished request's answer, if any
        (:class:`FaultConfig` ``abort_status``, ``reasoning_parse_error_rate``)."""
        server = self.server
        faults = server.fault_control.config
        status = faults.abort_status
        if plan.finish_reason == "abort" and status is not None:
            kind = "BadRequest" if status == 400 else str(status)  # ValueError / HTTPException
            return self.dialect.error(status, "Request aborted (simulated).", kind)
        rate = faults.reasoning_parse_error_rate
        if rate > 0 and server.profile.reasoning_parser is not None and server.rng.random() < rate:
            return self.dialect.error(500, "Failed to parse reasoning content")
        return None

    async def _wait(self, job: Job, request: web.Request, rid: str) -> bool:
        """Wait for ``job``; ``True`` if the client disconnected first (the job is then aborted).

        Like SGLang, a waiting handler checks for a disconnect every ``disconnect_poll_s``.
        """
        server = self.server
        engine = server.engine
        poll = engine.wall_seconds(server.profile.disconnect_poll_s)
        while not job.done.done():
            done, _ = await asyncio.wait({job.done}, timeout=poll)
            transport = request.transport
            if not done and (transport is None or transport.is_closing()):
                # SGLang aborts a disconnected request through abort_request(rid): every
                # in-flight request whose rid starts with this one goes too.
                server.telemetry.aborts_sent += 1
                if self.dialect.aborts_by_prefix:
                    server.inflight.abort_matching(rid, engine, sparing=job)
                engine.cancel(job, "disconnect")
                return True
        return False
