--[[
The hook over serve's event socket, outside slurmctld but against a real `bursar serve --socket`: run by
crates/cli/tests/slurm_hook.rs as `lua5.1 socket_test.lua DIR` with BURSAR_SLURM_CONFIG=DIR/bursar.lua
naming the socket (and the HTTP url, for --test-only). The serve it talks to has one policy: at most 8
GPUs a job.

  1. an allowed job and a denied one, each answered over the kept connection (the hook's answer and the
     admin comment it writes);
  2. prints `ready`, and waits for DIR/restarted: the runner restarts serve on the same socket meanwhile;
  3. the next submission reconnects on its own and is answered.
]]

local dir = assert(arg[1], "usage: lua5.1 socket_test.lua SCRATCH_DIR")
local here = arg[0]:match("^(.*)/[^/]*$") or "."

local logs = {}
slurm = {
  SUCCESS = 0, ERROR = -1, ESLURM_ACCESS_DENIED = 2002,
  log_info = function(...) logs[#logs + 1] = "info: " .. string.format(...) end,
  log_error = function(...) logs[#logs + 1] = "error: " .. string.format(...) end,
  log_user = function(...) logs[#logs + 1] = "user: " .. string.format(...) end,
}
assert(dofile(here .. "/../job_submit.lua") == slurm.SUCCESS, "the hook must load")
assert(table.concat(logs, "\n"):find("socket ", 1, true), "the hook says it asks over the socket: " .. table.concat(logs, "\n"))

local NO_VAL, NO_VAL16 = 4294967294, 65534
local function submit(gpus)
  logs = {}
  local job = { name = "j", user_name = "alice", account = "nlp", tres_per_node = "gres/gpu:" .. gpus, min_nodes = 1,
    max_nodes = NO_VAL, shared = NO_VAL16, sockets_per_node = NO_VAL16, num_tasks = NO_VAL, het_job_offset = NO_VAL,
    time_limit = 60, comment = "stage=finetune ready=all" }
  local rc = slurm_job_submit(job, {}, 1000)
  return rc, job, table.concat(logs, "\n")
end

local failures = 0
local function check(name, ok, detail)
  if ok then print("ok: " .. name) else failures = failures + 1; print("FAIL: " .. name .. "\n" .. tostring(detail)) end
end

local rc, job, said = submit(2)
check("an allowed job is accepted over the socket", rc == slurm.SUCCESS and tostring(job.admin_comment):find("bursar_job=", 1, true), said)
check("the answer names the decision", said:find("-> allow", 1, true), said)
rc, job, said = submit(16)
check("a denied job is rejected with bursar's reason", rc == slurm.ESLURM_ACCESS_DENIED and said:find("at most 8 GPUs", 1, true), said)

print("ready")
io.stdout:flush()
for _ = 1, 300 do
  local f = io.open(dir .. "/restarted", "r")
  if f then f:close(); break end
  os.execute("sleep 0.1")
end
rc, job, said = submit(2)
check("after serve restarted, the next submission reconnects and is answered", rc == slurm.SUCCESS and said:find("-> allow", 1, true), said)

if failures > 0 then
  print(failures .. " case(s) failed")
  os.exit(1)
end
print("all cases passed")
