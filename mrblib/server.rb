# The shared vocabulary of the server class (Apache or Nginx) that is
# plain Ruby on top of the C methods.
class << get_server_class
  # Writes str and a newline to the response body.
  def echo(str)
    rputs("#{str}\n")
  end
end
