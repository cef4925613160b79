# access_limiter.rb: the access phase (mrubyAccessCheckerMiddle,
# mruby_access_handler) of the files to limit.
####
threshold = 2
####
# Fleet mode: count across every server that shares this Redis, e.g.
# redis = "127.0.0.1:6379"; nil counts in this server only.
redis = nil
lease = 60          # fleet mode: seconds a count outlives a dead server
fail_open = true    # fleet mode, Redis down: let requests through

AccessLimiter.enter threshold, redis, lease, fail_open
