# Nginx::Utils, as the original ngx_mruby's mrblib has it: percent-encoding
# for query strings (Nginx::Async::HTTP.sub_request encodes a Hash with it).
# Only in an interpreter of the nginx modules.
if Object.const_defined?(:Nginx)
  class Nginx
    module Utils
      # Percent-encodes every byte but the unreserved ones (RFC 3986:
      # letters, digits, "-", ".", "_", "~").
      def self.escape(str)
        out = ""
        str.to_s.each_byte do |b|
          if (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5a) ||
             (b >= 0x61 && b <= 0x7a) || b == 0x2d || b == 0x2e ||
             b == 0x5f || b == 0x7e
            out << b.chr
          else
            out << format("%%%02X", b)
          end
        end
        out
      end

      # name=value pairs of a Hash or an Array of pairs, each part
      # escaped, the values between quote when one is given, joined with
      # delimiter.
      def self.encode_parameters(params, delimiter = "&", quote = nil)
        q = quote.to_s
        params.map { |k, v| "#{escape(k)}=#{q}#{escape(v)}#{q}" }.join(delimiter)
      end
    end
  end
end
