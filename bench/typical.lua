-- make bench, section typical: bench/typical.rb on lua-nginx-module.  The
-- request headers are read from ngx.req.get_headers(), the cheaper of
-- lua-nginx-module's two ways here: the same script reading them through
-- ngx.var.http_* took 54,635 instructions a request, this one 25,362
-- (bench/callgrind_lib.py typical-nginx-lua, 2026-11-27).
local h = ngx.req.get_headers()
local host = h["Host"]
local agent = h["User-Agent"]
local accept = h["Accept"]
local lang = h["Accept-Language"]
local cookie = h["Cookie"]
local hits = ngx.shared.typical:incr("hits", 1, 0)
ngx.header["Cache-Control"] = "no-store"
ngx.header["X-Hits"] = hits
ngx.print("host=" .. host .. " agent=" .. agent .. " accept=" .. accept
          .. " lang=" .. lang .. " cookie=" .. cookie .. " hits=" .. hits
          .. "\n")
