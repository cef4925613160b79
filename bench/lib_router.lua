-- make bench, section lib: the router of bench/lib_router.rb on
-- lua-nginx-module: the same 10 patterns, ngx.re.match with "jo" (PCRE JIT,
-- compiled once per worker), the same answer.
local uri = ngx.var.uri
local out = {}
local routes = {
    [[^/static/(.+)$]],
    [[\.(css|js|png|jpe?g|gif|ico|svg)$]],
    [[^/api/v(\d+)/]],
    [[^/api/v\d+/users/(\d+)]],
    [[/posts/(\d+)\.(json|xml)$]],
    [[^/admin/]],
    [[(?i)^/API/]],
    [[^/(?<section>[a-z]+)/]],
    [[\.php$]],
    [[^/[^/]+/v\d+/(\w+)/(\d+)/(\w+)/(\d+)]],
}
for i, route in ipairs(routes) do
    local m = ngx.re.match(uri, route, "jo")
    out[i] = i .. ":" .. (m and table.concat(m, ",") or "-")
end
ngx.print(table.concat(out, " "), "\n")
