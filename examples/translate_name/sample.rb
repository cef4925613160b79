# The mod_mruby paper, Fig. 7: every URI maps to one file.
r = Apache::Request.new

r.filename = r.document_root + "/translate_name/redirect.html"

Apache::return Apache::OK
