# The shared vocabulary of the server class (Apache or Nginx) that is
# plain Ruby on top of the C methods.
class << get_server_class
  # Writes obj (its to_s) and a newline to the response body.
  def echo(obj)
    rputs("#{obj}\n")
  end
end
