# Kernel#catch and #throw (mruby-catch), and SystemExit's status
# (src/lib/mrb_kernel_ext.c raises it).

class SystemExit
  def status
    @status
  end

  def success?
    @status == 0
  end
end

class UncaughtThrowError < ArgumentError
  attr_reader :tag, :value

  def initialize(tag, value, msg = nil)
    @tag = tag
    @value = value
    super(msg || "uncaught throw #{tag.inspect}")
  end
end

module Kernel
  # What throw raises towards its catch: an Exception, so that a bare
  # rescue (StandardError) on the way does not stop it.
  class ThrowTag < Exception
    attr_reader :tag, :value

    def initialize(tag, value)
      @tag = tag
      @value = value
      super("throw")
    end
  end

  def catch(tag = Object.new)
    tags = (Kernel.instance_variable_get(:@__catch_tags) ||
            Kernel.instance_variable_set(:@__catch_tags, []))
    tags.push(tag)
    begin
      yield tag
    rescue ThrowTag => t
      raise t unless t.tag.equal?(tag)
      t.value
    ensure
      tags.pop
    end
  end

  def throw(tag, value = nil)
    tags = Kernel.instance_variable_get(:@__catch_tags)
    unless tags && tags.any? { |t| t.equal?(tag) }
      raise UncaughtThrowError.new(tag, value)
    end
    raise ThrowTag.new(tag, value)
  end
end
