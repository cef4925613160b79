# access_limiter_end.rb: the log phase (mrubyLogTransactionMiddle,
# mruby_log_handler) of the files to limit.  Counts the request out (503s
# included: they were counted in too).  A request counted in Redis holds no
# count under its file name, so release says which way it was counted.
# Neither server runs the log phase for a sub-request, so unlike the access
# phase this one need not ask r.sub_request?.
r, counts = AccessLimiter::HANDLES
file = r.filename
AccessLimiter.fleet_out(r, file) unless counts.release(file)
