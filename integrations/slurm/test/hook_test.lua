--[[
Tests of job_submit.lua outside slurmctld, under the same Lua 5.1 that Debian's Slurm links: a stub `slurm`
table records what the hook tells Slurm, and `curl` is a fake script (CONFIG.curl, set through
BURSAR_SLURM_CONFIG) that prints a canned answer of bursar serve and its HTTP status. Run by
crates/cli/tests/slurm_hook.rs as `lua5.1 hook_test.lua DIR` with DIR a scratch directory.

Each case is an answer body (keys in any order, `other_decisions` holding decisions of their own) and what
the hook must do. The regression these pin: the hook read `decision` and `reason` as the first matching
key in the text, so an answer whose `other_decisions` came first was read as the wrong decision.
]]

local dir = assert(arg[1], "usage: lua5.1 hook_test.lua SCRATCH_DIR")
local here = arg[0]:match("^(.*)/[^/]*$") or "."

local logs = {}
slurm = {
  SUCCESS = 0, ERROR = -1, ESLURM_ACCESS_DENIED = 2002,
  log_info = function(...) logs[#logs + 1] = "info: " .. string.format(...) end,
  log_error = function(...) logs[#logs + 1] = "error: " .. string.format(...) end,
  log_user = function(...) logs[#logs + 1] = "user: " .. string.format(...) end,
}

local curl = dir .. "/fake-curl"
local answer_file = dir .. "/answer"
local f = assert(io.open(curl, "w"))
-- Prints the canned answer, a newline and the status, as `curl -w '\n%{http_code}'` does.
f:write("#!/bin/sh\ncat '" .. answer_file .. "'\nprintf '\\n%s' \"$(cat '" .. answer_file .. ".status')\"\n")
f:close()
os.execute("chmod +x '" .. curl .. "'")
local cfg = dir .. "/bursar.lua"
f = assert(io.open(cfg, "w"))
f:write('return { curl = "' .. curl .. '", cluster = "t" }\n')
f:close()

-- BURSAR_SLURM_CONFIG is read by the hook at load; os.getenv cannot be set from Lua 5.1, so the runner
-- passes it in the environment.
assert(os.getenv("BURSAR_SLURM_CONFIG") == cfg, "run with BURSAR_SLURM_CONFIG=" .. cfg)
assert(dofile(here .. "/../job_submit.lua") == slurm.SUCCESS, "the hook must load")

local function answer(status, body)
  local a = assert(io.open(answer_file, "w")); a:write(body); a:close()
  local s = assert(io.open(answer_file .. ".status", "w")); s:write(tostring(status)); s:close()
end

local function submit()
  logs = {}
  local job = { name = "j", user_name = "alice", account = "nlp", tres_per_node = "gres/gpu:2", min_nodes = 1,
    time_limit = 60, comment = "stage=finetune ready=all" }
  local rc = slurm_job_submit(job, {}, 1000)
  return rc, job, table.concat(logs, "\n")
end

local failures = 0
local function check(name, ok, detail)
  if ok then
    print("ok   " .. name)
  else
    failures = failures + 1
    print("FAIL " .. name .. "\n     " .. tostring(detail):gsub("\n", "\n     "))
  end
end

-- 1. The admission decision's fields are read by name, wherever `other_decisions` sits.
answer(200, [[{"other_decisions":[{"seq":9,"decision_id":"s/1","event_id":"s","time":"2026-11-02T09:00:00Z","decision":"deny","policies":["x/y"],"reason":"an alert's reason"}],"seq":8,"decision_id":"s/0","event_id":"s","time":"2026-11-02T09:00:00Z","decision":"allow","policies":[],"reason":"no policy applies to this job","admission":true}]])
local rc, job, log = submit()
check("allow read by field, other_decisions first", rc == slurm.SUCCESS and tostring(job.admin_comment):find("bursar_job=t-", 1, true), log)

-- 2. A deny with escapes and non-ASCII text in its reason reaches the user intact.
answer(200, [[{"seq":3,"decision_id":"s/0","event_id":"s","time":"2026-11-02T09:00:00Z","project":"nlp","decision":"deny","policies":["quota/monthly","fit/memory"],"reason":"project nlp would reach 10,250 of its 10,000 GPU-hours \u2014 \"over\"","admission":true}]])
rc, job, log = submit()
check("deny with its reason and policies", rc == slurm.ESLURM_ACCESS_DENIED
  and log:find('GPU-hours \226\128\148 "over" [quota/monthly, fit/memory]', 1, true), log)

-- 3. require_approval holds the job.
answer(200, [[{"decision":"require_approval","reason":"8 GPUs need an approver","policies":["approval/big"],"seq":4,"decision_id":"s/0","event_id":"s","time":"2026-11-02T09:00:00Z","admission":true}]])
rc, job, log = submit()
check("require_approval holds the job", rc == slurm.SUCCESS and job.priority == 0
  and tostring(job.admin_comment):find("bursar_hold=1", 1, true), log)

-- 4. defer sets the begin time from `until`.
answer(200, [[{"seq":5,"until":"2026-11-02T22:00:00Z","decision_id":"s/0","event_id":"s","time":"2026-11-02T09:00:00Z","decision":"defer","policies":["placement/off-peak"],"reason":"deferred","admission":true,"duplicate":true}]])
rc, job, log = submit()
check("defer sets begin_time", rc == slurm.SUCCESS and job.begin_time == 1793656800, "begin_time " .. tostring(job.begin_time) .. "\n" .. log)

-- 5. An error answer is fail-closed with serve's `error`.
answer(503, [[{"error":"the engine is shutting down"}]])
rc, job, log = submit()
check("an error status is fail-closed with serve's message", rc == slurm.ESLURM_ACCESS_DENIED
  and log:find("HTTP 503: the engine is shutting down", 1, true), log)

-- 6. An answer that is not JSON is fail-closed and says so.
answer(200, [[{"decision":"allow",]])
rc, job, log = submit()
check("a truncated answer is fail-closed", rc == slurm.ESLURM_ACCESS_DENIED and log:find("not JSON", 1, true), log)

if failures > 0 then
  print(failures .. " case(s) failed")
  os.exit(1)
end
print("all cases passed")
