# access_limiter_end.rb: the log phase (mrubyLogTransactionMiddle,
# mruby_log_handler) of the files to limit.
AccessLimiter.leave
