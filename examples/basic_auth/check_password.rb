# mrubyAuthnCheckPassword: is this the user's password?
USERS = {
  "alice" => "wonderland",
  "bob"   => "builder",
}

a = Apache::AuthnProvider.new

if USERS.key?(a.user)
  ok = USERS[a.user] == a.password
  Apache.return(ok ? Apache::AuthnProvider::AUTH_GRANTED
                   : Apache::AuthnProvider::AUTH_DENIED)
else
  Apache.return Apache::AuthnProvider::AUTH_USER_NOT_FOUND
end
