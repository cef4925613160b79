# Set (mruby-set's and CRuby's common methods), on a Hash (over mruby
# 3.3's mruby-set).  mruby 4.0 has a Set of its own (MRB_USE_SET), whose
# objects keep no instance variables: there only to_set is added (its
# inspect is Set[1, 2], not #<Set: {1, 2}>).

if MRUBY_RELEASE_NO < 40000
  class Set
    include Enumerable

    def self.[](*items)
      new(items)
    end

    def initialize(items = nil, &blk)
      @hash = {}
      return if items.nil?
      items.each { |x| add(blk ? blk.call(x) : x) }
    end

    def initialize_copy(other)
      @hash = other.instance_variable_get(:@hash).dup
    end

    def add(x)
      @hash[x] = true
      self
    end
    alias << add

    def add?(x)
      return nil if include?(x)
      add(x)
    end

    def delete(x)
      @hash.delete(x)
      self
    end

    def delete?(x)
      include?(x) ? delete(x) : nil
    end

    def include?(x)
      @hash.key?(x)
    end
    alias member? include?
    alias === include?

    def size
      @hash.size
    end
    alias length size
    alias count size

    def empty?
      @hash.empty?
    end

    def each(&blk)
      return to_enum(:each) unless blk
      @hash.each_key(&blk)
      self
    end

    def to_a
      @hash.keys
    end

    def to_set
      self
    end

    def dup
      Set.new(to_a)
    end

    def merge(*enums)
      enums.each { |e| e.each { |x| add(x) } }
      self
    end

    def clear
      @hash.clear
      self
    end

    def |(enum)
      dup.merge(enum)
    end
    alias union |
    alias + |

    def &(enum)
      s = Set.new
      enum.each { |x| s.add(x) if include?(x) }
      s
    end
    alias intersection &

    def -(enum)
      s = dup
      enum.each { |x| s.delete(x) }
      s
    end
    alias difference -

    def ^(enum)
      (self | enum) - (self & enum)
    end

    def subset?(other)
      size <= other.size && all? { |x| other.include?(x) }
    end
    alias <= subset?

    def superset?(other)
      other.subset?(self)
    end
    alias >= superset?

    def proper_subset?(other)
      size < other.size && subset?(other)
    end
    alias < proper_subset?

    def proper_superset?(other)
      other.proper_subset?(self)
    end
    alias > proper_superset?

    def disjoint?(other)
      none? { |x| other.include?(x) }
    end

    def intersect?(other)
      !disjoint?(other)
    end

    def ==(other)
      other.is_a?(Set) && size == other.size && subset?(other)
    end

    def eql?(other)
      other.is_a?(Set) && @hash.keys.sort_by(&:hash) == other.to_a.sort_by(&:hash)
    end

    def hash
      to_a.map(&:hash).sort.hash
    end

    def select!(&blk)
      @hash.keys.each { |x| delete(x) unless blk.call(x) }
      self
    end
    alias filter! select!

    def reject!(&blk)
      @hash.keys.each { |x| delete(x) if blk.call(x) }
      self
    end

    def delete_if(&blk)
      reject!(&blk)
    end

    def map!(&blk)
      items = to_a.map(&blk)
      clear
      merge(items)
    end

    def freeze
      @hash.freeze
      super
    end

    def inspect
      "#<Set: {#{to_a.map(&:inspect).join(', ')}}>"
    end
    alias to_s inspect
  end
end

module Enumerable
  def to_set
    Set.new(self)
  end
end

class Array
  def to_set
    Set.new(self)
  end
end
