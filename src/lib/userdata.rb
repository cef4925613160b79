# Userdata (matsumotory/mruby-userdata): a bag of values that every script
# of the interpreter sees, across phases and requests: Userdata.new (or
# Userdata.new("key") for a bag of its own), then u.name = value, u.name.
# The bags live in the class, which the isolation of request scripts
# leaves alone: this is the explicit way to keep a value.

class Userdata
  DEFAULT_KEY = "mrb_userdata"

  def self.__bag(key)
    bags = (@__bags ||= {})
    bags[key] ||= {}
  end

  def initialize(key = DEFAULT_KEY)
    @__bag = Userdata.__bag(key.to_s)
  end

  def method_missing(name, *args)
    n = name.to_s
    if n.end_with?("=") && args.size == 1
      @__bag[n[0..-2].to_sym] = args[0]
    elsif args.empty?
      @__bag[name]
    else
      super
    end
  end

  def respond_to_missing?(name, include_private = false)
    true
  end

  def [](name)
    @__bag[name.to_sym]
  end

  def []=(name, value)
    @__bag[name.to_sym] = value
  end
end
