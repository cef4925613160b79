# make bench, section lib: a router making 10 regexp matches per request
# (prefixes, extensions, captures, a named group, /i); bench/lib_router.lua
# does the same with ngx.re.match(..., "jo") and must answer the same.
uri = Nginx::Request.new.uri
out = []
[
  %r{^/static/(.+)$},
  %r{\.(css|js|png|jpe?g|gif|ico|svg)$},
  %r{^/api/v(\d+)/},
  %r{^/api/v\d+/users/(\d+)},
  %r{/posts/(\d+)\.(json|xml)$},
  %r{^/admin/},
  %r{(?i)^/API/},
  %r{^/(?<section>[a-z]+)/},
  %r{\.php$},
  %r{^/[^/]+/v\d+/(\w+)/(\d+)/(\w+)/(\d+)},
].each_with_index do |route, i|
  m = route.match(uri)
  out << "#{i + 1}:#{m ? m.captures.join(",") : "-"}"
end
Nginx.rputs out.join(" ") + "\n"
