# translate_name: /vhost/<path> of host H is sites/H/<path>.
r = Apache::Request.new

SITES = File.dirname(__FILE__) + "/sites"
ALLOWED = "abcdefghijklmnopqrstuvwxyz0123456789.-"

host = (r.hostname || "").downcase
plain = !host.empty? && host[0] != "." && !host.include?("..") &&
        host.each_char.all? { |ch| ALLOWED.include?(ch) }

if plain && File.directory?("#{SITES}/#{host}")
  root = "#{SITES}/#{host}"
  path = r.uri["/vhost".size..-1]
  path = "/index.html" if path.empty? || path == "/"
  r.document_root = root
  r.filename = root + path
  Apache.return Apache::OK
else
  Apache.return Apache::HTTP_NOT_FOUND
end
