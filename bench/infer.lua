-- wrk script: KServe v2 inference requests at a chosen cache-hit ratio.
--
-- Usage: wrk ... -s infer.lua URL -- BODY_DIR MISS_PER_10000 NONCE
-- BODY_DIR holds what cachefleet's harness wrote (bench/wrk.py): meta.txt (the path, the
-- headers, the slot format, the number of warm bodies), hit_<i>.bin and miss_{prefix,suffix}.bin.
-- Hits cycle through the warm bodies. A miss writes three numbers between the miss prefix and
-- suffix: the run's nonce, 1e9 + this thread's id and 1e9 + this thread's miss counter, so
-- misses never repeat across threads or runs. Request i of a thread is a miss when
-- floor(i * m / 10000) grows, which gives exactly m misses per 10000 requests.

local thread_count = 0

function setup(thread)
  thread:set("thread_id", thread_count)
  thread_count = thread_count + 1
end

local function read_file(path)
  local file = assert(io.open(path, "rb"))
  local data = file:read("*a")
  file:close()
  return data
end

local path, headers, slot_format
local hit_requests = {}
local miss_prefix, miss_suffix
local miss_per_10000, nonce
local sent = 0
local hit_index = 0
local misses = 0

function init(args)
  local dir = args[1]
  miss_per_10000 = tonumber(args[2])
  nonce = tonumber(args[3])
  headers = {}
  local hit_count = 0
  for line in io.lines(dir .. "/meta.txt") do
    local key, value = line:match("^([^=]+)=(.*)$")
    if key == "path" then
      path = value
    elseif key == "slot_format" then
      slot_format = value
    elseif key == "hit_count" then
      hit_count = tonumber(value)
    elseif key == "header" then
      local name, header_value = value:match("^([^:]+):%s*(.*)$")
      headers[name] = header_value
    end
  end
  for i = 0, hit_count - 1 do
    local body = read_file(string.format("%s/hit_%d.bin", dir, i))
    table.insert(hit_requests, wrk.format("POST", path, headers, body))
  end
  miss_prefix = read_file(dir .. "/miss_prefix.bin")
  miss_suffix = read_file(dir .. "/miss_suffix.bin")
end

local function int32le(n)
  return string.char(n % 256, math.floor(n / 256) % 256,
    math.floor(n / 65536) % 256, math.floor(n / 16777216) % 256)
end

local function slots(a, b, c)
  if slot_format == "i32le" then
    return int32le(a) .. int32le(b) .. int32le(c)
  end
  return string.format("%d,%d,%d", a, b, c)
end

function request()
  sent = sent + 1
  if math.floor(sent * miss_per_10000 / 10000) > math.floor((sent - 1) * miss_per_10000 / 10000) then
    misses = misses + 1
    local body = miss_prefix .. slots(nonce, 1000000000 + thread_id, 1000000000 + misses)
      .. miss_suffix
    return wrk.format("POST", path, headers, body)
  end
  hit_index = hit_index % #hit_requests + 1
  return hit_requests[hit_index]
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'CACHEFLEET_RESULT {"requests": %d, "duration_us": %d, "bytes": %d, '
      .. '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}, '
      .. '"latency_us": {"p50": %d, "p90": %d, "p99": %d, "max": %d, "mean": %.1f}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean))
end
