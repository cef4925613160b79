# access_limiter_end.rb: the log phase (mrubyLogTransactionMiddle,
# mruby_log_handler) of the files to limit.  Counts the request out (503s
# included: they were counted in too).  A request counted in Redis holds no
# count under its file name, so release says which way it was counted.
limiter = AccessLimiter
r = limiter::REQUEST
unless r.sub_request?
  file = r.filename
  limiter.fleet_out(file) unless limiter::COUNTS.release(file)
end
