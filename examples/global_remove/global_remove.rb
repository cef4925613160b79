# The mod_mruby paper, Fig. 5.
$hoge = 1
Apache.rputs "before: $hoge = #{$hoge.inspect}\n"

Apache::global_remove :$hoge

Apache.rputs "after:  $hoge = #{$hoge.inspect}\n"
