# Mutex (matsumotory/mruby-mutex's API).  Mutex.new is a lock within the
# interpreter; Mutex.new(global: true) is a lock across the server's worker
# processes, held as a key of the SharedDict "mruby_mutex" (declare it, or
# open it first in a post_config / mruby_init script, which makes it).
# Workers that run the same startup code make their global mutexes in the
# same order and so share them; name one with key: "name" to share it
# from anywhere.  A lock whose holder process died is taken over.
#
# The owner of a lock is the run that took it (mrb_mutex.c keeps which
# run holds which): another request of the worker sharing the Mutex waits
# for it, cannot unlock it, and a run that ends holding it lets it go.

class Mutex
  DICT = "mruby_mutex"

  def self.__next_key
    @__count = (@__count || 0) + 1
    "mutex-#{@__count}"
  end

  def initialize(opts = {})
    @locked = false
    return unless opts[:global]
    @dict = get_server_class::SharedDict.new(DICT)
    @key = (opts[:key] || Mutex.__next_key).to_s
  end

  # false while a run holds it, this one included
  def try_lock
    return false if @locked
    if @dict
      unless @dict.add(@key, Process.pid)
        holder = @dict[@key]
        return false unless holder && holder != Process.pid && Mutex.__dead?(holder.to_i)
        @dict.delete(@key)
        return false unless @dict.add(@key, Process.pid)
      end
    end
    @locked = true
    Mutex.__own(self)
    true
  end

  # waits until the lock is had: a global one tries every millisecond,
  # suspending the request in between where it can wait (nginx; Apache's
  # content handlers on the event MPM), blocking the thread where it
  # cannot (as the original did everywhere)
  def lock
    until try_lock
      raise ThreadError, "deadlock; recursive locking" if owned?
      __pause
    end
    self
  end

  # mruby-mutex's: tries the lock every retry_us microseconds; once it has
  # it, runs the block with self the Mutex (instance_eval, as there; the
  # block unlocks, as the original's callers do) and returns false.  A
  # global lock another still holds after timeout_us is taken from it, as
  # the original unlocked it to get on (its holder died or hangs): then
  # the block runs and true is returned.  The published access limiter
  # and DoS detector count under it.
  def try_lock_loop(retry_us = 100_000, timeout_us = 5_000_000, &block)
    waited = 0
    broke = false
    until try_lock
      raise ThreadError, "deadlock; recursive locking" if owned?
      if @dict && !broke && waited >= timeout_us
        @dict.delete(@key)
        broke = true
        next
      end
      __pause(retry_us)
      waited += retry_us
    end
    instance_eval(&block) if block
    broke
  end

  def unlock
    raise ThreadError, "attempt to unlock a mutex which is not locked" unless @locked
    raise ThreadError, "attempt to unlock a mutex which is locked by another run" unless owned?
    __release
    self
  end

  # lets the lock go: unlock, and the end of a run that still holds it
  def __release
    Mutex.__disown(self)
    @dict.delete(@key) if @dict
    @locked = false
  end

  def locked?
    @dict ? !@dict[@key].nil? : @locked
  end

  def owned?
    Mutex.__owned?(self)
  end

  def synchronize
    lock
    begin
      yield
    ensure
      unlock
    end
  end

  # us microseconds (a millisecond for lock) between two tries of a lock
  # held elsewhere: usleep
  # suspends the request where the run can wait (nginx, Apache's content
  # handlers on the event MPM), blocks the thread elsewhere on Apache, and
  # raises where a run of nginx cannot wait (the log phase, startup
  # scripts), which then blocks as the original did.  A lock another run
  # of this interpreter holds is waited for only by a run that can wait
  # (Mutex.__wait_check raises otherwise): blocking, it would keep that
  # run from resuming to let it go.
  def __pause(us = 1000)
    Mutex.__wait_check if @locked
    begin
      usleep(us)
    rescue RuntimeError
      IO.select(nil, nil, nil, us / 1_000_000.0)
    end
  end
end

class ThreadError < StandardError
end
