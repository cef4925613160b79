# access_limiter_end.rb: the log phase (mrubyLogTransactionMiddle,
# mruby_log_handler) of the files to limit.  Counts the request out (503s
# included: they were counted in too).  A request counted in Redis holds no
# count under its file name, so release says which way it was counted.
r = AccessLimiter::REQUEST
unless r.sub_request?
  file = r.filename
  AccessLimiter.fleet_out(file) unless AccessLimiter::COUNTS.release(file)
end
