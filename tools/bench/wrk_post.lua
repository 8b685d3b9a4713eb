-- wrk script for the delivery benchmark's ceiling (tools/bench/run_delivery_bench.sh): POSTs one
-- webhook request exactly as the deliverer sent it, replayed from bench_receiver --capture=FILE:
-- the body from $WRK_BODY_FILE and the headers from $WRK_BODY_FILE.headers ("Name: value" lines;
-- Host and Content-Length are left to wrk).
--
--   WRK_BODY_FILE=/tmp/x/capture wrk -t2 -c64 -d10s -s tools/bench/wrk_post.lua http://127.0.0.1:PORT/hooks

local body_file = os.getenv("WRK_BODY_FILE")
assert(body_file and body_file ~= "", "set WRK_BODY_FILE to a body captured by bench_receiver")

local f = assert(io.open(body_file, "rb"))
wrk.body = f:read("*a")
f:close()
wrk.method = "POST"

local skip = { host = true, ["content-length"] = true, connection = true }
local h = io.open(body_file .. ".headers", "rb")
if h then
  for line in h:lines() do
    local name, value = line:match("^([^:]+):%s?(.-)%s*$")
    if name and not skip[name:lower()] then
      wrk.headers[name] = value
    end
  end
  h:close()
end
if not wrk.headers["Content-Type"] then
  wrk.headers["Content-Type"] = "application/json"
end
