# access_limiter.rb: the access phase (mrubyAccessCheckerMiddle,
# mruby_access_handler) of the files to limit.
####
threshold = 2
####
# Fleet mode: count across every server that shares this Redis, e.g.
# redis = "127.0.0.1:6379", or this Redis Cluster (some of its nodes), e.g.
# redis = ["127.0.0.1:7000", "127.0.0.1:7001"], or the master these
# sentinels watch, e.g.
# redis = { sentinels: ["127.0.0.1:26379", "127.0.0.1:26380"],
#           name: "mymaster" };
# nil counts in this server only.
redis = nil
lease = 60          # fleet mode: seconds after which a request no server
                    # counted out stops counting (longer than any request)
fail_open = true    # fleet mode, Redis down: let requests through

# Counts the request in; 503 above threshold.  This runs on every request,
# so it is written out here rather than called as a method: in mruby a
# method call costs about as much as the counting itself, and every constant
# looked up costs too: hence the request handle, the dictionary and the
# server class (Server) all from one constant.
r, counts, server = AccessLimiter::HANDLES
unless r.sub_request?
  file = r.filename
  count = if redis
            AccessLimiter.fleet_in(r, file, redis, lease, fail_open)
          else
            counts.hold(file)
          end

  if count
    # every request: info, so that a busy server does not write an error
    # log line per request (Apache logs notice whatever its LogLevel); the
    # line is built only when the level is on
    if server.log_level?(server::LOG_INFO)
      server.errlogger server::LOG_INFO,
                       "access_limiter: file:#{file} counter:#{count}"
    end

    if count > threshold
      server.errlogger server::LOG_NOTICE, "access_limiter: file:#{file} " \
                       "reached threshold: #{threshold}: return 503"
      server.return server::HTTP_SERVICE_UNAVAILABLE
    end
  end
end
