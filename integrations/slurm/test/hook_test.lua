--[[
Tests of job_submit.lua outside slurmctld, under the same Lua 5.1 that Debian's Slurm links: a stub `slurm`
table records what the hook tells Slurm, and `curl` is a fake script (CONFIG.curl, set through
BURSAR_SLURM_CONFIG) that prints a canned answer of bursar serve and its HTTP status. Run by
crates/cli/tests/slurm_hook.rs as `lua5.1 hook_test.lua DIR` with DIR a scratch directory.

Each case is an answer body (keys in any order, `other_decisions` holding decisions of their own) and what
the hook must do. The regression these pin: the hook read `decision` and `reason` as the first matching
key in the text, so an answer whose `other_decisions` came first was read as the wrong decision. The fake
curl also keeps the last request (its URL and body), so the cases check what the hook asked: the
reservation's shape (arrays, exclusive nodes, node ranges, per-socket GPUs), `confirm_within_s`, the
`?test_only=true` of a `--test-only` submission, heterogeneous components, and job_modify's re-admission
of a partition change, an administrator's release, and what a user may not write or do (issue 43); and
what `--exclusive` reserves with no node_gpus setting: the largest node of its partition from the file the
watcher writes, the settings that override it, and what a missing file means (issue 55).
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
-- Keeps the request (the last argument is the URL, `@FILE` the body), then prints the canned answer, a
-- newline and the status, as `curl -w '\n%{http_code}'` does.
f:write("#!/bin/sh\nfor a in \"$@\"; do case \"$a\" in @*) cp \"${a#@}\" '" .. dir .. "/last-body';; esac; url=\"$a\"; done\n"
  .. "printf '%s' \"$url\" > '" .. dir .. "/last-url'\n"
  .. "cat '" .. answer_file .. "'\nprintf '\\n%s' \"$(cat '" .. answer_file .. ".status')\"\n")
f:close()
os.execute("chmod +x '" .. curl .. "'")
local cfg = dir .. "/bursar.lua"
f = assert(io.open(cfg, "w"))
f:write('return { curl = "' .. curl .. '", cluster = "t", node_gpus = 8, partition_node_gpus = { small = 4 }, confirm_within_s = 600 }\n')
f:close()

-- BURSAR_SLURM_CONFIG is read by the hook at load; os.getenv cannot be set from Lua 5.1, so the runner
-- passes it in the environment.
assert(os.getenv("BURSAR_SLURM_CONFIG") == cfg, "run with BURSAR_SLURM_CONFIG=" .. cfg)
assert(dofile(here .. "/../job_submit.lua") == slurm.SUCCESS, "the hook must load")

local function answer(status, body)
  local a = assert(io.open(answer_file, "w")); a:write(body); a:close()
  local s = assert(io.open(answer_file .. ".status", "w")); s:write(tostring(status)); s:close()
end

local NO_VAL, NO_VAL16 = 4294967294, 65534

local function submit(over, part_list)
  logs = {}
  local job = { name = "j", user_name = "alice", account = "nlp", tres_per_node = "gres/gpu:2", min_nodes = 1,
    max_nodes = NO_VAL, shared = NO_VAL16, sockets_per_node = NO_VAL16, num_tasks = NO_VAL, het_job_offset = NO_VAL,
    time_limit = 60, comment = "stage=finetune ready=all" }
  for k, v in pairs(over or {}) do job[k] = v end
  local rc = slurm_job_submit(job, part_list or {}, 1000)
  return rc, job, table.concat(logs, "\n")
end

local function read(name)
  local h = io.open(dir .. "/" .. name, "r")
  if not h then return "" end
  local t = h:read("*a")
  h:close()
  return t
end

-- The last request's body, its URL.
local function body() return read("last-body") end
local function url() return read("last-url") end

local ALLOW = [[{"seq":1,"decision_id":"s/0","event_id":"s","time":"2026-11-02T09:00:00Z","decision":"allow","policies":[],"reason":"ok","admission":true}]]
local DENY = [[{"seq":1,"decision_id":"s/0","event_id":"s","time":"2026-11-02T09:00:00Z","decision":"deny","policies":["quota/q"],"reason":"over","admission":true}]]

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

-- 1b. An allow with serve's estimate tells the user when the job is expected to start (issue 53), and
-- the hook asked for it.
answer(200, [[{"seq":2,"decision_id":"s/0","event_id":"s","time":"2026-11-02T09:00:00Z","decision":"allow","policies":[],"reason":"ok","admission":true,"estimate":{"region":"cn-north","queue":"gpu","in_service":8,"allocated":8,"free":0,"drained":0,"reported":"2026-11-02T09:00:00Z","running_jobs":1,"waiting_jobs":0,"start":"2026-11-02T09:40:00Z","wait_s":2400}}]])
rc, job, log = submit()
check("an allow says when the job is expected to start", rc == slurm.SUCCESS
  and log:find("admitted; expected start in about 40 min in cn-north / gpu", 1, true), log)
check("the hook asks for the estimate over HTTP", url():find("/v1/admit?estimate=true", 1, true), url())

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

-- 7. Arrays: every task reserved, the throttle for the concurrent GPUs.
answer(200, ALLOW)
for _, c in ipairs({
  { "0-9%3", '"array":{"tasks":10,"max_running":3}' },
  { "1,3,5-7", '"array":{"tasks":5}' },
  { "0-15:4", '"array":{"tasks":4}' },
  { "[1-5:2]%2", '"array":{"tasks":3,"max_running":2}' },
}) do
  rc, job, log = submit({ array_inx = c[1] })
  check("array " .. c[1], rc == slurm.SUCCESS and body():find(c[2], 1, true), body() .. "\n" .. log)
end
rc, job, log = submit({ array_inx = "9-1" })
check("an unreadable array index is fail-closed", rc == slurm.ESLURM_ACCESS_DENIED and log:find("array", 1, true), log)

-- 8. What the hook cannot see from the request is estimated high.
rc = submit({ shared = 0, tres_per_node = false, min_nodes = 2 })
check("--exclusive -N 2: the nodes' 16 GPUs", rc == slurm.SUCCESS and body():find('"gpus":16', 1, true), body())
rc = submit({ shared = 0, tres_per_node = false, partition = "small" })
check("--exclusive on a partition of 4-GPU nodes", body():find('"gpus":4', 1, true), body())
rc = submit({ min_nodes = 1, max_nodes = 2 })
check("-N 1-2 --gres=gpu:2: at the maximum", body():find('"gpus":4', 1, true) and body():find('"nodes":2', 1, true), body())
rc = submit({ tres_per_node = false, tres_per_socket = "gres:gpu:1", sockets_per_node = 2 })
check("--gpus-per-socket=1 --sockets-per-node=2", body():find('"gpus":2', 1, true), body())
rc = submit({ tres_per_node = false, tres_per_socket = "gres:gpu:1" })
check("--gpus-per-socket=1 on the default 2 sockets", body():find('"gpus":2', 1, true), body())

-- 9. Every admission promises a confirmation, and is marked with what it reserved.
rc, job = submit()
check("confirm_within_s is sent", body():find('"confirm_within_s":600', 1, true), body())
check("the AdminComment says what was admitted", tostring(job.admin_comment):match("^bursar_job=t%-%x+ bursar_gpus=2$"),
  tostring(job.admin_comment))
check("a plain submission asks /v1/admit", not url():find("test_only", 1, true), url())

-- 10. --test-only (marked by cli_filter.lua): bursar is asked to record nothing; the job is held unmarked.
rc, job, log = submit({ comment = "stage=finetune bursar_test_only=1" })
check("a test-only submission asks ?test_only=true", url():find("/v1/admit?test_only=true", 1, true), url())
check("nothing to confirm for a test", not body():find("confirm_within_s", 1, true), body())
check("a test-only job is held with no bursar id", rc == slurm.SUCCESS and job.priority == 0
  and job.admin_comment == "bursar_test_only=1", tostring(job.admin_comment) .. "\n" .. log)
check("the marker is no tag", not body():find('"bursar_test_only"', 1, true), body())
answer(200, DENY)
rc, job, log = submit({ comment = "bursar_test_only=1" })
check("a test-only deny is a deny", rc == slurm.ESLURM_ACCESS_DENIED and log:find("would deny", 1, true), log)
answer(200, ALLOW)

-- 11. Heterogeneous components: one admission each, named after the first.
rc, job = submit({ het_job_offset = 0 })
local group = tostring(job.admin_comment):match("bursar_job=(t%-%x+)")
rc, job = submit({ het_job_offset = 1 })
check("component 1 is <group>+1", group and tostring(job.admin_comment):find("bursar_job=" .. group .. "+1", 1, true)
  and body():find('"het":{"group":"' .. group .. '","offset":1}', 1, true), tostring(job.admin_comment) .. "\n" .. body())

-- 12. Words only bursar writes are refused in user text.
rc, job, log = submit({ name = "x AdminComment=bursar_job=t-victim" })
check("a name holding AdminComment= is refused", rc == slurm.ESLURM_ACCESS_DENIED and log:find("its name holds", 1, true), log)
rc, job, log = submit({ comment = "stage=x bursar_readmit=t-victim" })
check("a comment holding bursar_readmit= is refused", rc == slurm.ESLURM_ACCESS_DENIED and log:find("its comment", 1, true), log)
rc, job, log = submit({ work_dir = "/tmp/a AdminComment=x" })
check("a work dir holding AdminComment= is refused", rc == slurm.ESLURM_ACCESS_DENIED, log)

-- 13. job_modify.
local INFINITE = 4294967295
local function modify(desc, rec, uid)
  logs = {}
  local d = { priority = NO_VAL, min_nodes = NO_VAL, max_nodes = NO_VAL, shared = NO_VAL16, time_limit = NO_VAL }
  for k, v in pairs(desc) do d[k] = v end
  local r = { job_id = 77, user_id = 1000, partition = "debug", time_limit = 60, comment = "stage=x",
    admin_comment = "bursar_job=t-000000000001 bursar_gpus=4", tres_per_node = "gres:gpu:2", min_nodes = 1,
    max_nodes = 1, name = "j", array_job_id = 0, het_job_id = 0 }
  for k, v in pairs(rec or {}) do r[k] = v end
  local rc = slurm_job_modify(d, r, {}, uid)
  return rc, d, table.concat(logs, "\n")
end
local held = { admin_comment = "bursar_job=t-000000000001 bursar_gpus=4 bursar_hold=1" }
rc, job = modify({ priority = INFINITE }, held, 0)
check("root's release of a held job is recorded", rc == slurm.SUCCESS
  and job.admin_comment == "bursar_job=t-000000000001 bursar_gpus=4 bursar_released_by=root", tostring(job.admin_comment))
rc, job = modify({ admin_comment = "bursar_job=t-000000000001 bursar_gpus=4" }, held, 0)
check("the enforcer's clearing of the marker is not a release", rc == slurm.SUCCESS
  and job.admin_comment == "bursar_job=t-000000000001 bursar_gpus=4", tostring(job.admin_comment))
rc, job = modify({ priority = INFINITE }, {}, 0)
check("root's release of a job not held records nothing", rc == slurm.SUCCESS and job.admin_comment == nil, tostring(job.admin_comment))
rc = modify({ priority = INFINITE }, held, 1000)
check("the owner may not release a held job", rc == slurm.ESLURM_ACCESS_DENIED)
rc = modify({ priority = INFINITE }, { admin_comment = "bursar_test_only=1" }, 0)
check("nobody releases a job carrying the test-only marker", rc == slurm.ESLURM_ACCESS_DENIED)
rc = modify({ min_nodes = 2 }, {}, 1000)
check("the owner may not grow the job", rc == slurm.ESLURM_ACCESS_DENIED)
rc = modify({ name = "bursar_job=t-x" }, {}, 1000)
check("the owner may not write bursar's words", rc == slurm.ESLURM_ACCESS_DENIED)

-- A partition change is admitted again: the new id in the Comment, the old one named as replaced.
answer(200, ALLOW)
rc, job, log = modify({ partition = "other" }, {}, 1000)
local new = tostring(job.comment):match("bursar_readmit=(t%-%x+)$")
check("a partition change is re-admitted", rc == slurm.SUCCESS and new and job.comment:find("^stage=x ")
  and body():find('"queue":"other"', 1, true) and body():find('"replaces":"t-000000000001"', 1, true)
  and body():find('"gpus":4', 1, true), tostring(job.comment) .. "\n" .. body() .. "\n" .. log)
rc, job = modify({ partition = "third" }, { comment = "stage=x bursar_readmit=t-000000000002" }, 1000)
check("a second change replaces the re-admission", rc == slurm.SUCCESS
  and body():find('"replaces":"t-000000000002"', 1, true)
  and select(2, tostring(job.comment):gsub("bursar_readmit=", "")) == 1, tostring(job.comment))
rc, job = modify({ comment = "stage=y" }, { comment = "stage=x bursar_readmit=t-000000000002" }, 1000)
check("a new comment keeps the re-admission word", rc == slurm.SUCCESS
  and job.comment == "stage=y bursar_readmit=t-000000000002", tostring(job.comment))
answer(200, DENY)
rc = modify({ partition = "other" }, {}, 1000)
check("a denied partition change is refused", rc == slurm.ESLURM_ACCESS_DENIED)
answer(200, ALLOW)
rc = modify({ partition = "other" }, { array_job_id = 5 }, 1000)
check("an array may not change partition", rc == slurm.ESLURM_ACCESS_DENIED)

-- 14. --exclusive without a setting (issue 55): the largest node of the job's partition, from the file
-- `bursar slurm watch` writes; node_gpus and partition_node_gpus override it; with neither, an exclusive
-- job gets no decision (fail closed). The hook is loaded again with each configuration.
local node_file = dir .. "/watch.node-gpus.tsv"
local function configure(extra)
  local c = assert(io.open(cfg, "w"))
  c:write('return { curl = "' .. curl .. '", cluster = "t", confirm_within_s = 600, node_gpus_file = "'
    .. node_file .. '", ' .. (extra or "node_gpus_file_every = 0") .. ' }\n')
  c:close()
  assert(dofile(here .. "/../job_submit.lua") == slurm.SUCCESS, "the hook must load")
end
local function node_gpus(text)
  if not text then os.remove(node_file); return end
  local h = assert(io.open(node_file, "w")); h:write(text); h:close()
end
local function gpus_sent() return tonumber(body():match('"gpus":(%d+)')) end
local EXCL = { shared = 0, tres_per_node = false }
local function excl(over)
  local t = {}
  for k, v in pairs(EXCL) do t[k] = v end
  for k, v in pairs(over or {}) do t[k] = v end
  return t
end
answer(200, ALLOW)
configure()
node_gpus(nil)
os.remove(dir .. "/last-body")
rc, job, log = submit(excl({ partition = "debug" }))
check("--exclusive, no setting, no file: no decision (fail closed), naming the file", rc == slurm.ESLURM_ACCESS_DENIED
  and log:find("node_gpus is not set", 1, true) and log:find(node_file, 1, true) and body() == "", log .. "\n" .. body())
rc, job = submit()
check("without the file a job that is not exclusive is still admitted", rc == slurm.SUCCESS and gpus_sent() == 2, body())
node_gpus("# bursar slurm watch: ...\ndebug\t8\nsmall\t4\ncpu\t0\nnot a line\nbad\t-3\n")
rc, job = submit(excl({ partition = "small" }))
check("--exclusive -p small reads the file: 4", rc == slurm.SUCCESS and gpus_sent() == 4
  and tostring(job.admin_comment):find("bursar_gpus=4$"), body() .. "\n" .. tostring(job.admin_comment))
rc = submit(excl({ partition = "debug", min_nodes = 2 }))
check("--exclusive -N 2 -p debug: two nodes of 8", gpus_sent() == 16 and body():find('"nodes":2', 1, true), body())
rc = submit(excl({ partition = "cpu" }))
check("--exclusive on a partition without GPUs: 0", rc == slurm.SUCCESS and gpus_sent() == 0, body())
rc = submit(excl({ partition = "small,debug" }))
check("--exclusive -p small,debug: the larger node", gpus_sent() == 8, body())
rc = submit(excl({ partition = "newpart" }))
check("--exclusive on a partition the file lacks: the largest node of all", gpus_sent() == 8, body())
rc = submit(excl(), { debug = { flag_default = 0 }, small = { flag_default = 1 } })
check("--exclusive naming no partition: the default partition's (part_list)", gpus_sent() == 4, body())
rc = submit(excl(), {})
check("--exclusive naming no partition, no default known: the largest node of all", gpus_sent() == 8, body())
rc = submit(excl({ partition = "small", tres_per_node = "gres/gpu:6" }))
check("--exclusive asking more than a node holds keeps what it asked", gpus_sent() == 6, body())
node_gpus("# nothing yet\n")
rc, job, log = submit(excl({ partition = "small" }))
check("a file listing no partition is no answer", rc == slurm.ESLURM_ACCESS_DENIED and log:find("lists no partition", 1, true), log)

configure('partition_node_gpus = { small = 2 }, node_gpus = 6, node_gpus_file_every = 0')
node_gpus("debug\t8\nsmall\t4\n")
rc = submit(excl({ partition = "small" }))
check("partition_node_gpus overrides the file", gpus_sent() == 2, body())
rc = submit(excl({ partition = "debug" }))
check("node_gpus overrides the file", gpus_sent() == 6, body())
node_gpus(nil)
rc = submit(excl({ partition = "debug" }))
check("with node_gpus set the file is not needed", rc == slurm.SUCCESS and gpus_sent() == 6, body())

configure('fail_open = true, node_gpus_file_every = 0')
rc, job, log = submit(excl({ partition = "debug" }))
check("no file with fail_open: accepted, marked unadmitted", rc == slurm.SUCCESS
  and tostring(job.admin_comment):find("bursar_unadmitted=1", 1, true), tostring(job.admin_comment) .. "\n" .. log)

configure('node_gpus_file_every = 3600')
node_gpus("debug\t8\n")
rc = submit(excl({ partition = "debug" }))
node_gpus("debug\t4\n")
local first = gpus_sent()
rc = submit(excl({ partition = "debug" }))
check("the file is read again only after node_gpus_file_every seconds", first == 8 and gpus_sent() == 8, body())
node_gpus(nil)

-- 15. MIG slices (issue 55, item 7): a GRES type holding a MIG profile counts as its share of a GPU,
-- summed exactly and sent as "2/7" when not whole; whole counts stay integers (byte-identical JSON).
configure('node_gpus = 8, node_gpus_file_every = 0')
answer(200, ALLOW)
local function sent(field) return body():match('"' .. field .. '":("?[^,"]*"?)') end
for _, c in ipairs({
  { "--gres=gpu:1g.10gb:2", { tres_per_node = "gres:gpu:1g.10gb:2" }, '"2/7"', "1G.10GB" },
  { "AutoDetect's a100_1g.10gb, gres/gpu:T=N", { tres_per_node = "gres/gpu:a100_1g.10gb=2" }, '"2/7"', "A100_1G.10GB" },
  { "a count-less slice", { tres_per_node = "gres:gpu:1g.10gb" }, '"1/7"', "1G.10GB" },
  { "--gpus=3g.40gb:1 (per job)", { tres_per_node = false, tres_per_job = "gres:gpu:3g.40gb:1" }, '"3/7"', "3G.40GB" },
  { "seven tasks of one slice: one whole GPU, an integer", { tres_per_node = false,
    tres_per_task = "gres:gpu:1g.10gb:1", num_tasks = 7 }, "1", "1G.10GB" },
  { "-N 2 of three slices", { tres_per_node = "gres:gpu:1g.10gb:3", min_nodes = 2 }, '"6/7"', "1G.10GB" },
  { "-N 1-3 of three slices: at the maximum, 9/7", { tres_per_node = "gres:gpu:1g.10gb:3", max_nodes = 3 }, '"9/7"', "1G.10GB" },
  { "--gpus-per-socket=1g.10gb:1 on 2 sockets", { tres_per_node = false, tres_per_socket = "gres:gpu:1g.10gb:1" }, '"2/7"', "1G.10GB" },
  { "A30 1g.6gb x2: a half", { tres_per_node = "gres:gpu:1g.6gb:2" }, '"1/2"', "1G.6GB" },
  { "A30 2g.12gb", { tres_per_node = "gres:gpu:2g.12gb:1" }, '"1/2"', "2G.12GB" },
  { "A30 4g.24gb: a whole GPU", { tres_per_node = "gres:gpu:4g.24gb:1" }, "1", "4G.24GB" },
  { "H100 94 GB 2g.24gb", { tres_per_node = "gres:gpu:2g.24gb:1" }, '"2/7"', "2G.24GB" },
  { "7g.80gb: the whole GPU", { tres_per_node = "gres:gpu:7g.80gb:2" }, "2", "7G.80GB" },
  { "mixed: one h100 and two slices", { tres_per_node = "gres:gpu:h100:1,gres:gpu:1g.10gb:2" }, '"9/7"', "H100" },
  { "slices of two profiles", { tres_per_node = "gres:gpu:3g.40gb:1,gres:gpu:1g.10gb:2" }, '"5/7"', "3G.40GB" },
  { "not a profile at a word's start: a whole GPU", { tres_per_node = "gres:gpu:x1g.10gb:2" }, "2", nil },
  { "more slices than a GPU has: a whole GPU", { tres_per_node = "gres:gpu:9g.90gb:1" }, "1", nil },
  { "a plain --gres=gpu:2 is as before", {}, "2", nil },
  { "a typed --gres=gpu:h100:2 is as before", { tres_per_node = "gres:gpu:h100:2" }, "2", "H100" },
}) do
  rc, job = submit(c[2])
  local ok_type = c[4] == nil and not body():find('"gpu_type"', 1, true) or body():find('"gpu_type":"' .. tostring(c[4]) .. '"', 1, true)
  check("MIG: " .. c[1] .. " -> " .. c[3], rc == slurm.SUCCESS and sent("gpus") == c[3] and ok_type
    and tostring(job.admin_comment):find("bursar_gpus=" .. c[3]:gsub('"', "") .. "$"), body() .. "\n" .. tostring(job.admin_comment))
end
rc = submit({ tres_per_node = "gres:gpu:1g.10gb:2", array_inx = "0-9%3" })
check("MIG: an array of 2-slice tasks: 2/7 a task, every task and the throttle", sent("gpus") == '"2/7"'
  and body():find('"array":{"tasks":10,"max_running":3}', 1, true), body())
rc = submit({ shared = 0, tres_per_node = "gres:gpu:1g.10gb:2" })
check("MIG: --exclusive stays whole GPUs (the node's 8)", sent("gpus") == "8", body())
-- A re-admission keeps what was admitted, a fraction included.
rc, job = modify({ partition = "other" }, { tres_per_node = "gres:gpu:1g.10gb:2",
  admin_comment = "bursar_job=t-000000000001 bursar_gpus=3/7" }, 1000)
check("MIG: a partition change re-admits at least the admitted 3/7", rc == slurm.SUCCESS and sent("gpus") == '"3/7"', body())
rc, job = modify({ partition = "other" }, { tres_per_node = "gres:gpu:1g.10gb:2",
  admin_comment = "bursar_job=t-000000000001 bursar_gpus=1/7" }, 1000)
check("MIG: ... or the 2/7 it asks", rc == slurm.SUCCESS and sent("gpus") == '"2/7"', body())

-- mig_shares overrides a profile's share, or a whole GRES type's; an inexact share is logged and ignored.
logs = {}
configure('node_gpus = 8, node_gpus_file_every = 0, mig_shares = { ["1g.10gb"] = "1/8", mig_small = "1/7", ["2g.20gb"] = 0.25, ["3g.40gb"] = "1/9" }')
local load_log = table.concat(logs, "\n")
rc = submit({ tres_per_node = "gres:gpu:1g.10gb:2" })
check("mig_shares: 1g.10gb = 1/8, two of them: 1/4", sent("gpus") == '"1/4"', body())
rc = submit({ tres_per_node = "gres/gpu:a100_1g.10gb=2" })
check("mig_shares: the profile's override applies inside a longer type", sent("gpus") == '"1/4"', body())
rc = submit({ tres_per_node = "gres:gpu:mig_small:3" })
check("mig_shares: a site's own type name", sent("gpus") == '"3/7"' and body():find('"gpu_type":"MIG_SMALL"', 1, true), body())
rc = submit({ tres_per_node = "gres:gpu:2g.20gb:1" })
check("mig_shares: a number", sent("gpus") == '"1/4"', body())
rc = submit({ tres_per_node = "gres:gpu:3g.40gb:1" })
check("mig_shares: an inexact share is logged at load and ignored", sent("gpus") == '"3/7"'
  and load_log:find("mig_shares[3g.40gb] = 1/9", 1, true), body() .. "\n" .. load_log)

if failures > 0 then
  print(failures .. " case(s) failed")
  os.exit(1)
end
print("all cases passed")
