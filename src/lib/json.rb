# The Ruby parts of JSON (src/lib/mrb_json.c holds parse and generate).

module JSON
  def self.load(source, *)
    source.nil? ? nil : parse(source.respond_to?(:read) ? source.read : source)
  end
end

class Object
  def to_json(*)
    JSON.generate(self)
  end
end
