# Enumerable#chain and Enumerator#+ (mruby-enum-chain).

module Enumerable
  def chain(*others)
    parts = [self] + others
    Enumerator.new do |y|
      parts.each { |e| e.each { |x| y << x } }
    end
  end
end

class Enumerator
  def +(other)
    chain(other)
  end
end
