# The slow page of the demo (the access-limiter post's sleep.php, without PHP).
Apache.sleep 3
Apache.rputs "loaded"
