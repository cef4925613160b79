-- make bench, section typical: bench/typical.rb on Apache's mod_lua.
-- mod_lua has no dictionary shared between processes; the counter is in
-- its inter-VM memory (r:ivm_get / r:ivm_set: one process's interpreters),
-- which also makes the increment two calls where SharedDict#incr is one.
function handle(r)
    local h = r.headers_in
    local host = h["Host"]
    local agent = h["User-Agent"]
    local accept = h["Accept"]
    local lang = h["Accept-Language"]
    local cookie = h["Cookie"]
    local hits = math.floor((r:ivm_get("hits") or 0) + 1)  -- not 2.0
    r:ivm_set("hits", hits)
    r.headers_out["Cache-Control"] = "no-store"
    r.headers_out["X-Hits"] = tostring(hits)
    r.content_type = "text/plain"
    r:puts("host=" .. host .. " agent=" .. agent .. " accept=" .. accept
           .. " lang=" .. lang .. " cookie=" .. cookie .. " hits=" .. hits
           .. "\n")
    return apache2.OK
end
