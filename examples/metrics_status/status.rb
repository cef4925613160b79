# The server's per-script metrics (every worker's runs, summed), with a
# text plot of each script's run times: one row per histogram bucket.
Server = get_server_class
WIDTH = 40

Server.metrics.each do |m|
  runs = m["runs"]
  mean_ms = runs > 0 ? m["run_seconds"] * 1000 / runs : 0.0
  Server.rputs format("%s (%s): %d runs, %d 5xx, mean %.2f ms, " \
                      "%.3f s waiting\n", m["script"], m["phase"], runs,
                      m["responses_5xx"], mean_ms, m["wait_seconds"])
  m["exceptions"].each { |cls, n| Server.rputs "  raised #{cls}: #{n}\n" }

  below = 0
  m["run_seconds_buckets"].each do |le, upto|
    n = upto - below
    below = upto
    bar = "#" * (runs > 0 ? (n * WIDTH + runs - 1) / runs : 0)
    Server.rputs format("  <= %7.4f s %6d %s", le, n, bar).rstrip + "\n"
  end
  Server.rputs format("   > %7.4f s %6d\n",
                      m["run_seconds_buckets"].last[0], runs - below)
end
