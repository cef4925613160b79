# A Rack-style application, run by Kernel#run on Apache or nginx alike.
class HelloRack
  def call(env)
    if env["PATH_INFO"].end_with?("/missing")
      return [404, {"Content-Type" => "text/plain"}, ["no such page\n"]]
    end

    body = "Hello from #{env["SERVER_SOFTWARE"]}\n" \
           "#{env["REQUEST_METHOD"]} #{env["PATH_INFO"]}?#{env["QUERY_STRING"]}\n" \
           "agent: #{env["HTTP_USER_AGENT"]}\n"

    [200,
     {"Content-Type" => "text/plain", "X-Rack-App" => "HelloRack",
      "Set-Cookie" => "a=1\nb=2"},
     [body]]
  end
end

run HelloRack.new
