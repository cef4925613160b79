# Forwardable (mruby-forwardable): def_delegator and def_delegators.

module Forwardable
  def def_delegator(accessor, method, ali = method)
    accessor = accessor.to_s
    method = method.to_sym
    define_method(ali.to_sym) do |*args, &blk|
      target = if accessor.start_with?("@")
                 instance_variable_get(accessor)
               else
                 __send__(accessor)
               end
      target.__send__(method, *args, &blk)
    end
  end
  alias delegate_method def_delegator

  def def_delegators(accessor, *methods)
    methods.each { |m| def_delegator(accessor, m) }
  end

  def delegate(hash)
    hash.each do |methods, accessor|
      Array(methods).each { |m| def_delegator(accessor, m) }
    end
  end
end
