"""The MCP server (the official SDK's MCPServer): tools `remember`, `recall`, `memory_types` and the
resource memoria://memory-types, on the same AsyncMemorySystem as the REST API.

Which tenant a call acts for comes from outside the tool's arguments: over stdio, the tenant the
process was started for (`memoria-pg mcp --tenant T`); over HTTP, the tenant the guard in front of
/mcp resolved from the request's API key (auth.RequireTenant). No tool takes a tenant argument.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .. import AsyncMemorySystem, CandidateRecord, Config, Embedder, MemoriaError, __version__
from .auth import scope_tenant

T = TypeVar("T")

INSTRUCTIONS = """Long-term memory for this conversation's user or agent, kept in PostgreSQL.
Call `recall` before answering anything that may depend on what was said or learned earlier (names,
preferences, plans, facts about people, past events, how something was done). Call `remember` for each
new durable fact, preference, event or procedure worth keeping, one memory per call, written so it
makes sense on its own ("Maya's favourite colour is teal", not "it is teal"). `memory_types` explains
which memory_type to use."""

TYPE_DESCRIPTIONS = {
    "general": "Anything that fits no other type (the default).",
    "episodic": "Something that happened, at a time: events, conversations, experiences "
    "(e.g. 'On 3 May Maya moved to Porto').",
    "semantic": "General knowledge and concepts, not tied to one person or moment "
    "(e.g. 'Porto is in northern Portugal').",
    "procedural": "How to do something: steps, workflows, habits, instructions "
    "(e.g. 'Deploys go through the staging branch first').",
    "preference": "Likes, dislikes, wishes and opinions of a person (e.g. 'Maya prefers tea to coffee').",
    "fact": "A stable fact about a person or thing: names, relations, places, dates (e.g. 'Jonas is Maya's brother').",
}


class Remembered(BaseModel):
    id: int = Field(description="The memory's id: the new one, or the one already stored with this text")
    stored: bool = Field(description="False when the same memory was already stored (nothing changed)")


class Recalled(BaseModel):
    id: int
    memory_type: str
    content: str
    metadata: dict[str, Any] = Field(description="The JSON object stored with it (`remember`'s metadata)")
    created_at: dt.datetime
    score: float = Field(description="The final score (the list is in this order)")
    sources: list[str] = Field(
        description="Which retrieval methods found it: vector, bm25, phrase, attribute, graph, temporal"
    )
    scores: dict[str, float] = Field(description="Each source's own score and rank")
    explanation: dict[str, float] = Field(description="How much each ranking signal added")
    why: str = Field(description="The same, in one line")


class Recall(BaseModel):
    memories: list[Recalled]


class Forgotten(BaseModel):
    deleted: int = Field(description="Memories deleted")


class Updated(BaseModel):
    id: int
    memory_type: str
    content: str
    importance: float
    status: str = Field(description="active, invalidated or superseded")


class Event(BaseModel):
    event: str = Field(description="stored, updated, invalidated, restored or deleted")
    at: dt.datetime
    detail: dict[str, Any] = Field(description="For an update, `previous`: the fields it had")


class History(BaseModel):
    events: list[Event]


class MemoryType(BaseModel):
    name: str
    description: str


class MemoryTypes(BaseModel):
    types: list[MemoryType]


def why(c: CandidateRecord) -> str:
    found = ", ".join(
        f"{source} ({_score_text(c.scores, source)})" if _score_text(c.scores, source) else source
        for source in c.sources
    )
    signals = ", ".join(f"{k} {v:.2f}" for k, v in sorted(c.explanation.items(), key=lambda kv: -abs(kv[1]))[:4])
    return f"found by {found or 'the relevance pool'}; score {c.final_score:.3f}" + (f" ({signals})" if signals else "")


def _score_text(scores: dict[str, float], source: str) -> str:
    for key in (f"{source}_distance", source, f"{source}_hops"):
        if key in scores:
            return f"{key} {scores[key]:.3g}"
    return ""


def recalled(c: CandidateRecord) -> Recalled:
    return Recalled(
        id=c.memory_id,
        memory_type=c.memory_type,
        content=c.content,
        metadata=dict(c.metadata),
        created_at=c.created_at,
        score=c.final_score,
        sources=list(c.sources),
        scores=dict(c.scores),
        explanation=dict(c.explanation),
        why=why(c),
    )


async def memory_types_of(memory: AsyncMemorySystem) -> MemoryTypes:
    """The types as the database has them now (one added since the server started included)."""
    names = await _call(memory.refresh_memory_types())
    return MemoryTypes(
        types=[
            MemoryType(name=n, description=TYPE_DESCRIPTIONS.get(n, "A type this deployment added (`types add`)."))
            for n in names
        ]
    )


TenantOf = Callable[[Context], str]
MAX_ID = 2**63 - 1  # a bigint
MemoryId = Annotated[int, Field(strict=True, ge=1, le=MAX_ID, description="A memory's id, as `recall` returned it")]
MAX_FORGET = 1000  # ids per `forget` call (the REST API's --max-batch default)
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


def stdio_tenant(tenant: str) -> TenantOf:
    return lambda ctx: tenant


def http_tenant(ctx: Context) -> str:
    tenant = scope_tenant(ctx.request_context.request)
    if tenant is None:  # the guard always sets it; a request that bypassed it must not get a default
        raise ToolError("this request carries no authenticated tenant")
    return tenant


def build_mcp(memory: Callable[[], AsyncMemorySystem], tenant_of: TenantOf) -> MCPServer:
    """The MCP server; `memory` gives the (started) AsyncMemorySystem, `tenant_of` a call's tenant.
    Every tool refuses arguments it does not declare (`strict`)."""
    tools: list[Tool] = []

    def tool(name: str, description: str, annotations: ToolAnnotations) -> Callable[[ToolFunction], ToolFunction]:
        def register(fn: ToolFunction) -> ToolFunction:
            tools.append(strict(Tool.from_function(fn, name=name, description=description, annotations=annotations)))
            return fn

        return register

    _add_remember(tool, memory, tenant_of)
    _add_recall(tool, memory, tenant_of)
    _add_lifecycle(tool, memory, tenant_of)

    @tool("memory_types", "The memory types and what belongs in each.", READ_ONLY)
    async def memory_types() -> MemoryTypes:
        return await memory_types_of(memory())

    server: MCPServer = MCPServer(
        "memoria-pg", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING", tools=tools
    )

    @server.resource(
        "memoria://memory-types", name="memory-types", description="The memory types", mime_type="text/markdown"
    )
    async def memory_types_resource() -> str:
        return "\n".join(f"- **{t.name}**: {t.description}" for t in (await memory_types_of(memory())).types)

    return server


ToolFunction = Callable[..., Any]
Register = Callable[[str, str, ToolAnnotations], Callable[[ToolFunction], ToolFunction]]


def strict(tool: Tool) -> Tool:
    """The tool with an argument model that refuses undeclared arguments (a misspelt `memory_typ`, a
    `tenant`) instead of ignoring them, and says so in its input schema (additionalProperties false)."""
    loose = tool.fn_metadata.arg_model
    model: type[BaseModel] = type(
        loose.__name__, (loose,), {"model_config": ConfigDict(**loose.model_config, extra="forbid")}
    )
    metadata = tool.fn_metadata.model_copy(update={"arg_model": model})
    return tool.model_copy(update={"fn_metadata": metadata, "parameters": model.model_json_schema(by_alias=True)})


def _add_remember(tool: Register, memory: Callable[[], AsyncMemorySystem], tenant_of: TenantOf) -> None:
    @tool(
        "remember",
        "Store one memory (a fact, preference, event or procedure worth keeping) for later recall. "
        "Write it so it is understandable on its own. Storing the same text again changes nothing.",
        ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False),
    )
    async def remember(
        ctx: Context,
        content: Annotated[str, Field(description="The memory, as a self-contained sentence or short paragraph")],
        memory_type: Annotated[
            str | None, Field(description="general, episodic, semantic, procedural, preference or fact (memory_types)")
        ] = None,
        importance: Annotated[float, Field(ge=0, le=1, description="How much it matters, 0 to 1")] = 0.5,
        context: Annotated[
            str | None, Field(description="Optional text that situates it, e.g. the question it answers")
        ] = None,
        metadata: Annotated[
            dict[str, Any] | None, Field(description="Optional JSON object, e.g. {'speaker': 'Maya'}")
        ] = None,
        valid_to: Annotated[
            dt.datetime | None,
            Field(description="Optional ISO 8601 time from which it no longer holds (e.g. the end of a trip)"),
        ] = None,
    ) -> Remembered:
        fields: dict[str, Any] = {"tenant": tenant_of(ctx), "memory_type": memory_type, "importance": importance}
        given = (("context", context), ("metadata", metadata), ("valid_to", valid_to))
        fields.update({k: v for k, v in given if v is not None})
        try:
            result = await memory().store_many([{"content": content, **fields}], writers=1)
        except MemoriaError as exc:
            raise ToolError(str(exc)) from exc
        new, existing = result.ids[0], result.existing[0]
        memory_id = new if new is not None else existing
        if memory_id is None:  # a duplicate whose memory was deleted in between: nothing to point to
            raise ToolError("the memory was stored already and has just been deleted; call remember again")
        return Remembered(id=memory_id, stored=new is not None)


def _add_recall(tool: Register, memory: Callable[[], AsyncMemorySystem], tenant_of: TenantOf) -> None:
    @tool(
        "recall",
        "Search the memories for what is relevant to a question or topic. Returns the best matches "
        "first, each with its score and why it matched (which retrieval methods found it).",
        READ_ONLY,
    )
    async def recall(
        ctx: Context,
        query: Annotated[str, Field(description="What to look for, as a question or keywords")],
        memory_type: Annotated[str | None, Field(description="Only memories of this type (see memory_types)")] = None,
        top_k: Annotated[int, Field(ge=1, le=50, description="How many memories to return")] = 5,
        reference_time: Annotated[
            dt.datetime | None,
            Field(
                description="Optional ISO 8601 time the question is asked at, which 'last week' or 'four weeks ago' "
                "count back from (default now): for a conversation replayed later"
            ),
        ] = None,
    ) -> Recall:
        try:
            response = await memory().query(
                query, tenant=tenant_of(ctx), memory_type=memory_type, top_k=top_k, candidates=False,
                reference_time=reference_time,
            )  # fmt: skip
        except MemoriaError as exc:
            raise ToolError(str(exc)) from exc
        return Recall(memories=[recalled(c) for c in response.memories])


def _add_lifecycle(tool: Register, memory: Callable[[], AsyncMemorySystem], tenant_of: TenantOf) -> None:
    @tool(
        "forget",
        "Delete memories for good, by id (from `recall`): when the user asks to forget something, "
        "or a memory is wrong. Prefer `update` to correct one.",
        ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False),
    )
    async def forget(
        ctx: Context,
        memory_ids: Annotated[
            list[MemoryId], Field(min_length=1, max_length=MAX_FORGET, description="The ids to delete")
        ],
    ) -> Forgotten:
        return Forgotten(deleted=await _call(memory().delete(memory_ids, tenant=tenant_of(ctx))))

    @tool(
        "update",
        "Correct or refine a memory (by id, from `recall`): give only what changes. Its history "
        "keeps the previous values.",
        ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False),
    )
    async def update(
        ctx: Context,
        memory_id: MemoryId,
        content: Annotated[str | None, Field(description="The corrected text")] = None,
        memory_type: Annotated[str | None, Field(description="A new type (see memory_types)")] = None,
        importance: Annotated[float | None, Field(ge=0, le=1, description="A new importance, 0 to 1")] = None,
    ) -> Updated:
        given = {"content": content, "memory_type": memory_type, "importance": importance}
        changes = {k: v for k, v in given.items() if v is not None}
        m = await _call(memory().update(memory_id, tenant=tenant_of(ctx), **changes))
        return Updated(id=m.id, memory_type=m.memory_type, content=m.content, importance=m.importance, status=m.status)

    @tool("history", "What happened to a memory (by id): stored, updated, deleted...", READ_ONLY)
    async def history(ctx: Context, memory_id: MemoryId) -> History:
        events = await _call(memory().history(memory_id, tenant=tenant_of(ctx)))
        return History(events=[Event(event=e.event, at=e.at, detail=e.detail) for e in events])


async def _call(call: Awaitable[T]) -> T:
    """A library call whose errors (with their messages) become the tool's error."""
    try:
        return await call
    except MemoriaError as exc:
        raise ToolError(str(exc)) from exc


async def run_stdio(
    config: Config,
    tenant: str,
    *,
    embedder: Embedder | None = None,
    quiet_stdout: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext,
) -> None:
    """`memoria-pg mcp`: MCP over stdin/stdout for `tenant`. `quiet_stdout` guards the protocol's stream
    while the memory opens (a server it starts must not write there)."""
    with quiet_stdout():
        memory = await AsyncMemorySystem.open(config, embedder=embedder)
    try:
        await serve_stdio(build_mcp(lambda: memory, stdio_tenant(tenant)))
    finally:
        await memory.close()


async def serve_stdio(server: MCPServer) -> None:
    """MCPServer.run_stdio_async, except that a line which is not a JSON-RPC message is answered with
    the error JSON-RPC 2.0 prescribes (-32700 parse error, -32600 invalid request; id null, the line's
    id being unknown). The SDK's stdio transport hands the server the exception and the server drops
    it, so a client would wait for an answer that never comes (over HTTP the SDK answers 400)."""
    lowlevel = server._lowlevel_server  # what run_stdio_async runs too; the SDK has no public hook here
    async with stdio_server() as (read, write):
        forward, messages = anyio.create_memory_object_stream[SessionMessage | Exception](0)

        async def answer_bad_lines() -> None:
            async with forward:
                async for item in read:
                    if isinstance(item, Exception):
                        await write.send(SessionMessage(_unreadable(item)))
                    else:
                        await forward.send(item)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(answer_bad_lines)
            await lowlevel.run(messages, write, lowlevel.create_initialization_options())
            tasks.cancel_scope.cancel()


def _unreadable(exc: Exception) -> JSONRPCError:
    """The JSON-RPC error for a line the transport could not read as a message."""
    errors = exc.errors() if isinstance(exc, ValidationError) else []
    if any(e["type"] == "json_invalid" for e in errors):
        error = ErrorData(code=PARSE_ERROR, message="Parse error: the line is not valid JSON")
    else:
        error = ErrorData(
            code=INVALID_REQUEST,
            message="Invalid Request: not a JSON-RPC 2.0 request, notification or response (jsonrpc, method, id)",
        )
    return JSONRPCError(jsonrpc="2.0", id=None, error=error)
