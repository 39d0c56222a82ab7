-- wrk script: POST a different Alertmanager notification on every request (unique fingerprints and startsAt),
-- and print the result as one JSON line. BENCH_BODY_FILE holds the body with @@FP@@ and @@NS@@ placeholders;
-- BENCH_SEQ_BASE differs per wrk run, so no run repeats an earlier run's fingerprints (that would measure dedup).
local counter = 1
local base = 0
local threads = {}
local template = nil

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  local f = assert(io.open(os.getenv("BENCH_BODY_FILE"), "r"))
  template = f:read("*a")
  base = tonumber(os.getenv("BENCH_SEQ_BASE") or "0")
  f:close()
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Authorization"] = "Bearer " .. os.getenv("BENCH_TOKEN")
end

function request()
  counter = counter + 1
  local seq = base + tid * 100000000 + counter
  local body = template:gsub("@@FP@@", string.format("%012x", seq)):gsub("@@NS@@", string.format("%09d", seq % 1000000000))
  return wrk.format(nil, nil, nil, body)
end

function done(summary, latency, requests)
  local s = summary
  io.write(string.format(
    'BENCH_JSON {"requests": %d, "duration_us": %d, "bytes": %d, "errors_connect": %d, "errors_read": %d, ' ..
    '"errors_write": %d, "errors_status": %d, "errors_timeout": %d, "lat_p50_us": %d, "lat_p99_us": %d, ' ..
    '"lat_max_us": %d}\n', s.requests, s.duration, s.bytes, s.errors.connect, s.errors.read, s.errors.write,
    s.errors.status, s.errors.timeout, latency:percentile(50), latency:percentile(99), latency.max))
end
