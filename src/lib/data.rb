# Data.define (mruby-data): immutable value classes.
#   Point = Data.define(:x, :y); p = Point.new(x: 1, y: 2) or Point.new(1, 2)

# mruby 3.3 brings a Data of its own (the mruby-data gem): without with,
# and hashing by identity.  This one replaces it, the same on every mruby.
Object.__send__(:remove_const, :Data) if Object.const_defined?(:Data)

class Data
  def self.define(*fields, &blk)
    fields = fields.map(&:to_sym)
    klass = Class.new(Data)
    klass.instance_variable_set(:@__fields, fields)
    fields.each do |f|
      klass.define_method(f) { instance_variable_get("@#{f}") }
    end
    klass.class_eval(&blk) if blk
    klass
  end

  def self.members
    @__fields
  end

  def self.new(*args, **kw)
    fields = members
    if !args.empty?
      raise ArgumentError, "wrong number of arguments (given #{args.size}, expected #{fields.size})" if args.size > fields.size
      args.each_with_index { |v, i| kw[fields[i]] = v }
    end
    missing = fields - kw.keys
    raise ArgumentError, "missing keyword#{missing.size > 1 ? 's' : ''}: #{missing.map(&:inspect).join(', ')}" unless missing.empty?
    extra = kw.keys - fields
    raise ArgumentError, "unknown keyword#{extra.size > 1 ? 's' : ''}: #{extra.map(&:inspect).join(', ')}" unless extra.empty?
    obj = allocate
    fields.each { |f| obj.instance_variable_set("@#{f}", kw[f]) }
    obj.freeze
  end

  def members
    self.class.members
  end

  def to_h
    h = {}
    members.each { |f| h[f] = send(f) }
    h
  end

  def with(**kw)
    self.class.new(**to_h.merge(kw))
  end

  def ==(other)
    other.class == self.class && other.to_h == to_h
  end
  alias eql? ==

  def hash
    to_h.hash
  end

  def inspect
    "#<data #{self.class}#{members.map { |f| " #{f}=#{send(f).inspect}" }.join(',')}>"
  end
  alias to_s inspect
end
