# Handler: a full page when the server is quiet, a light one when busy.
BUSY_LIMIT = 4          # busy workers beyond this mean "under load"

r = Apache::Request.new
sb = Apache::Scoreboard.new
r.content_type = "text/plain"

busy = sb.busy_worker
load1 = sb.loadavg[0]

# The machine's load average is there too (sb.loadavg); this server's own
# busy workers are the better signal when other programs share the host.
if busy > BUSY_LIMIT
  r.headers_out["Retry-After"] = "5"
  Apache.rputs "light page: #{busy} busy workers, load #{load1}\n"
else
  Apache.rputs "full page: #{busy} busy workers, #{sb.idle_worker} idle, " \
               "load #{load1}, #{sb.total_access} requests served, " \
               "up #{sb.uptime} s\n"
end
