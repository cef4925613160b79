# The slow page of the demo (seed 002's sleep.php, without PHP).
Apache.sleep 3
Apache.rputs "loaded"
