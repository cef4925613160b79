# make bench, section typical: what a content script commonly does: five
# request headers read, a counter in a shared dictionary, two response
# headers, a body with interpolation.  bench/typical.lua (lua-nginx-module)
# and bench/typical_mod_lua.lua (Apache's mod_lua) do the same; on Apache
# bench/run.py runs this file with Nginx spelled Apache.
r = Nginx::Request.new
h = r.headers_in
host = h["Host"]
agent = h["User-Agent"]
accept = h["Accept"]
lang = h["Accept-Language"]
cookie = h["Cookie"]
hits = Nginx::SharedDict.new("typical").incr("hits", 1, init: 0)
out = r.headers_out
out["Cache-Control"] = "no-store"
out["X-Hits"] = hits.to_s
Nginx.rputs "host=#{host} agent=#{agent} accept=#{accept} lang=#{lang} " \
            "cookie=#{cookie} hits=#{hits}\n"
