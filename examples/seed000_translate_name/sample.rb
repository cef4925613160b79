# Seed 000, Fig. 7: every URI maps to one file.
r = Apache::Request.new

r.filename = r.document_root + "/seed000_translate_name/redirect.html"

Apache::return Apache::OK
