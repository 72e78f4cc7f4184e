-- wrk script for the Kindgi bench (bench/run.py).
--
--   wrk ... -s bench/wrk.lua URL                      GETs of URL, as given on the command line
--   wrk ... -s bench/wrk.lua URL -- post BODY NONCE   POSTs of BODY (JSON), each with a fresh
--                                                     Idempotency-Key: bench-NONCE-THREAD-N
--
-- At the end it prints one line, "BENCH_JSON {...}": requests, time, errors, latencies (µs) and
-- the latency histogram ("value:count,…").

local threads = 0
local counter = 0
local mode, nonce

function setup(thread)
   threads = threads + 1
   thread:set("thread_no", threads)
end

function init(args)
   mode = args[1] or "get"
   if mode == "post" then
      wrk.method = "POST"
      wrk.body = args[2]
      wrk.headers["Content-Type"] = "application/json"
      nonce = args[3] or tostring(os.time())
   end
end

function request()
   if mode == "post" then
      counter = counter + 1
      wrk.headers["Idempotency-Key"] = string.format("bench-%s-%d-%d", nonce, thread_no, counter)
   end
   return wrk.format()
end

function done(summary, latency, requests)
   local e = summary.errors
   local hist = {}  -- every latency seen (µs) and how often, so rounds can be merged exactly
   for i = 1, #latency do
      local value, count = latency(i)
      hist[#hist + 1] = string.format("%d:%d", value, count)
   end
   io.write(string.format(
      'BENCH_JSON {"requests": %d, "duration_us": %d, "bytes": %d, "connect": %d, "read": %d, '
         .. '"write": %d, "status": %d, "timeout": %d, "p50_us": %d, "p99_us": %d, "max_us": %d, '
         .. '"hist": "%s"}\n',
      summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status,
      e.timeout, latency:percentile(50), latency:percentile(99), latency.max,
      table.concat(hist, ",")))
end
