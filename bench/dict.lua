-- wrk script for bench/dict.sh: POST bodies for the dict endpoints.
--
--   BENCH_OP=lookup|set  BENCH_DICT=name  BENCH_KEYS=N  (environment)
--
-- lookup: {"key":"shared/bench/<i>"}, every i < N prefilled (so all are found)
-- set:    {"key":"shared/bench/<i>","value":"<base64 of 66 bytes>"}
-- i walks the key space in steps of a prime, so consecutive requests hit
-- different keys and every key is visited.
local op = os.getenv("BENCH_OP") or "lookup"
local dict = os.getenv("BENCH_DICT") or "d"
local keys = tonumber(os.getenv("BENCH_KEYS") or "10000")
local path = "/api/backend/dict/" .. dict .. "/" .. op
local value = string.rep("UGV0cmVs", 11) -- 88 base64 characters = 66 bytes

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

local counter = 0

function request()
  counter = (counter + 7919) % keys
  local body
  if op == "set" then
    body = string.format('{"key":"shared/bench/%d","value":"%s"}', counter, value)
  else
    body = string.format('{"key":"shared/bench/%d"}', counter)
  end
  return wrk.format(nil, path, nil, body)
end
