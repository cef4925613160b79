# access_limiter_worker_init.rb: in every worker before its first request
# (Apache child_init, nginx mruby_init_worker).  What it defines stays for
# the worker's life; the request scripts only call it.
#
# Counting.  The number of requests running for a file (r.filename) lives in
# the shared dictionary "access_limiter", as a *held* count: hold adds one
# on behalf of this worker process, release takes it back.  A worker killed
# in the middle of requests (SIGKILL, a crash) cannot release, so the
# dictionary withdraws what a dead process held, at most a second after it
# died, while the counts of requests still running elsewhere stay.
#
# Fleet mode (redis = "host:port" in access_limiter.rb): the count lives in
# Redis, shared by every server that uses it: INCR on the way in, DECR on the
# way out, and each INCR renews the key's lease (EXPIRE), so the counts of a
# server that died go away once its file has been quiet for `lease` seconds.
# Redis down: the request goes through (fail open) or gets 503 (fail
# closed), with an error log line either way.
Server = get_server_class

module AccessLimiter
  DICT      = "access_limiter"
  FLEET     = "\0fleet\0"   # this process took a fleet count for a file
  REDIS_AT  = "\0redis"     # where the fleet counts are, for the log phase
  KEY       = "access_limiter:"
  DECR      = "local n = redis.call('DECR', KEYS[1]) " \
              "if n <= 0 then redis.call('DEL', KEYS[1]) end return n"

  def self.dict
    @dict ||= Server::SharedDict.new(DICT)
  end

  # The access phase: counts the request in; 503 above threshold.
  def self.enter(threshold, redis = nil, lease = 60, fail_open = true)
    r = Server::Request.new
    return if r.sub_request?
    file = r.filename
    count = redis ? fleet_in(file, redis, lease, fail_open) : dict.hold(file)
    return if count.nil?
    # every request: info, so that a busy server does not write an error
    # log line per request (Apache logs notice whatever its LogLevel)
    Server.errlogger Server::LOG_INFO,
                     "access_limiter: file:#{file} counter:#{count}"
    if count > threshold
      Server.errlogger Server::LOG_NOTICE, "access_limiter: file:#{file} " \
                       "reached threshold: #{threshold}: return 503"
      Server.return Server::HTTP_SERVICE_UNAVAILABLE
    end
  end

  # The log phase: counts the request out (503s included: they were
  # counted in too).
  def self.leave
    r = Server::Request.new
    return if r.sub_request?
    file = r.filename
    dict.release(file)
    fleet_out(file, dict[REDIS_AT]) if dict.release(FLEET + file)
  end

  def self.redis(addr)
    host, port = addr.split(":")
    # one connection per worker interpreter, kept across requests
    Redis.new(host, port.to_i, timeout: 0.5)
  end

  def self.fleet_in(file, addr, lease, fail_open)
    if @redis_at != addr
      dict[REDIS_AT] = addr
      @redis_at = addr
    end
    count = redis(addr).pipelined { |p|
      p.incr(KEY + file)
      p.expire(KEY + file, lease)
    }[0]
    dict.hold(FLEET + file)
    count
  rescue Redis::BaseError => e
    Server.errlogger Server::LOG_ERR, "access_limiter: redis #{addr} " \
                     "unavailable (#{e.class}: #{e.message}): failing " \
                     "#{fail_open ? 'open' : 'closed'} for #{file}"
    Server.return Server::HTTP_SERVICE_UNAVAILABLE unless fail_open
    nil
  end

  def self.fleet_out(file, addr)
    redis(addr).call("EVAL", DECR, 1, KEY + file)
  rescue Redis::BaseError => e
    Server.errlogger Server::LOG_ERR, "access_limiter: redis #{addr} " \
                     "unavailable (#{e.class}: #{e.message}): the count of " \
                     "#{file} is left to its lease"
  end
end
