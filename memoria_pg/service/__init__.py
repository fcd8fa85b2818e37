"""`memoria-pg serve` and `memoria-pg mcp`: the memory as a service, on the library.

REST under /v1 (FastAPI on uvicorn) and MCP (the official SDK; stdio, and streamable HTTP at /mcp of
the same app), both on one AsyncMemorySystem per process, so every request runs the MemorySystem code
path and row-level security keeps the tenants apart. The service only decides which tenant a request
acts for, from its API key (keys.py, auth.py). Needs the `server` extra: pip install 'memoria-pg[server]'.

    settings.py   ServiceSettings (host, port, limits; MEMORIA_SERVE_* variables)
    keys.py       API keys: tokens, hashes, create/list/revoke, the key cache
    auth.py       which tenant a request acts for (REST dependency, the ASGI guard of /mcp)
    problems.py   errors as application/problem+json (RFC 9457)
    schemas.py    request and response bodies
    state.py      the per-process state and the dependencies routes share (memory, tenant, query check)
    health.py, memories.py, search.py, lifecycle.py   the /v1 routers (one module per subject)
    mcp_server.py the MCP tools and resources
    app.py        the FastAPI app: lifespan, routers, limits, /mcp
    openapi.py    writes the checked-in openapi.json

Nothing here is imported by `import memoria_pg`: the server's dependencies stay optional.
"""
