"""A per-file limiter written in the manner of the published access
limiter (http-access-limiter), for the tests of the calls it relies on: a
class a post_config script defines, a global Mutex and a Cache kept in
Userdata, an access checker that counts a request in under
Mutex#try_lock_loop(50000) { ... ensure unlock } and answers 503 when
more than two run at once, and a log-phase script that counts it out,
deleting the file's key at zero.  Where the Cache is opened is the test's
choice: once in post_config (OPEN_IN_POST_CONFIG), or in every child's
init, emptied there as the limiter's older revision does (CHILD_INIT).

The log lines, for the tests to look for:
  in_flight: FILE now N                    each request counted in
  in_flight: FILE over 2, answered 503     each refusal
  in_flight: lock of FILE taken over       try_lock_loop timed out
  in_flight: FILE back to N                each request counted out"""

# post_config: the lock all children share, and what the phase scripts
# count with.  The count of a file is a String in the Cache, keyed by the
# file's path; a file that no request is loading has no key.
POST_CONFIG = r'''
Userdata.new.in_flight_lock = Mutex.new :global => true

class InFlight
  def initialize(store, file)
    raise ArgumentError, "InFlight: no file to count" if file.nil?
    @store = store
    @key = file.to_s
  end

  def count
    @store[@key].to_i
  end

  def enter
    @store[@key] = (count + 1).to_s
  end

  def leave
    left = count - 1
    if left > 0
      @store[@key] = left.to_s
    elsif @store[@key]
      @store.delete @key
    end
  end
end
'''

OPEN_IN_POST_CONFIG = \
    'Userdata.new.in_flight = Cache.new :namespace => "in_flight"\n'

# child_init: the child opens the store by its namespace and empties it.
CHILD_INIT = r'''
store = Cache.new :namespace => "in_flight"
store.clear
Userdata.new.in_flight = store
'''

ACCESS = r'''
limit = 2
Server = get_server_class
file = Server::Request.new.filename
here = InFlight.new Userdata.new.in_flight, file
lock = Userdata.new.in_flight_lock
taken_over = lock.try_lock_loop(50000) do
  begin
    here.enter
    n = here.count
    Server.errlogger Server::LOG_NOTICE, "in_flight: #{file} now #{n}"
    if n > limit
      Server.errlogger Server::LOG_NOTICE,
                       "in_flight: #{file} over #{limit}, answered 503"
      Server.return Server::HTTP_SERVICE_UNAVAILABLE
    end
  ensure
    lock.unlock
  end
end
if taken_over
  Server.errlogger Server::LOG_NOTICE, "in_flight: lock of #{file} taken over"
end
'''

# A refused request is counted out too: it was counted in.
LOG = r'''
Server = get_server_class
file = Server::Request.new.filename
here = InFlight.new Userdata.new.in_flight, file
lock = Userdata.new.in_flight_lock
lock.try_lock_loop(50000) do
  begin
    here.leave
    Server.errlogger Server::LOG_NOTICE,
                     "in_flight: #{file} back to #{here.count}"
  ensure
    lock.unlock
  end
end
'''

# /count?FILE: the file's count as the Cache holds it (nil: no key).
COUNT = r'''
file = Apache::Request.new.args
Apache.rputs Cache.new(:namespace => "in_flight")[file].inspect
'''
