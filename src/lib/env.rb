# The Ruby parts of ENV (src/lib/mrb_env.c reads and writes).

class EnvClass
  include Enumerable

  def fetch(name, *default)
    v = self[name]
    return v unless v.nil?
    return yield(name) if block_given?
    return default[0] unless default.empty?
    raise KeyError, "key not found: #{name.inspect}"
  end

  def key?(name)
    !self[name].nil?
  end
  alias has_key? key?
  alias include? key?
  alias member? key?

  def keys
    to_hash.keys
  end

  def values
    to_hash.values
  end

  def each(&blk)
    to_hash.each(&blk)
    self
  end
  alias each_pair each

  def to_h(&blk)
    blk ? to_hash.to_h(&blk) : to_hash
  end

  def size
    to_hash.size
  end
  alias length size

  def empty?
    size == 0
  end

  def inspect
    to_hash.inspect
  end

  def to_s
    "ENV"
  end
end
