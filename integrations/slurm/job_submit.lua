--[[
job_submit.lua — Slurm admission through bursar (docs/integrations/slurm.md).

slurmctld calls slurm_job_submit() for every submission, before the job has a Slurm job id. This script
turns the job description into a bursar v1 `job.submitted` event, asks `bursar serve` for the admission
decision over POST /v1/admit (curl, short timeout: Lua calls are serialised inside slurmctld), and maps
the answer onto Slurm:

  allow            -> accept
  deny             -> reject (ESLURM_ACCESS_DENIED), bursar's reason shown by sbatch
  require_approval -> accept held (priority 0, an admin hold); `bursar slurm enforce` releases it when
                      bursar streams the approval
  defer            -> accept with a begin time (`until`)
  no answer        -> reject (fail closed, the default) or accept (fail_open = true)

The job gets a bursar job id (`<cluster>-<12 hex>`) generated here; it is stored in the job's
AdminComment as `bursar_job=<id>`, which only administrators can change. `bursar slurm watch` reads it
back and sends job.started / job.finished carrying both ids, so the audit log links bursar's id to Slurm's.

Attributes Slurm has no field for travel as key=value pairs in `--comment` (and `--extra`, which wins):
  stage=finetune dataset=ds-42 image=registry/llm:1.4 script_hash=sha256:ab12 model_params_b=7
  ready=image,data,script deferrable=true gpu_mem_gb=80 project=nlp team=search tag.owner=x ...
separated by spaces or `;`. Unknown keys become tags.

Settings: a Lua file `bursar.lua` next to this script (or $BURSAR_SLURM_CONFIG) returning a table that
overrides any key of CONFIG below.
]]

local CONFIG = {
  url = "http://127.0.0.1:7878/v1/admit",  -- bursar serve's admission route
  token_file = nil,         -- file holding a bearer token (serve --token), or nil
  timeout = 2,              -- seconds for the whole HTTP call (curl -m)
  connect_timeout = 0.5,    -- seconds to connect (curl --connect-timeout)
  fail_open = false,        -- accept the job when bursar cannot answer (default: reject it)
  cluster = "slurm",        -- prefix of the bursar job ids this script makes
  default_project = "default", -- project when neither --account nor project= is given
  default_hours = 1,        -- requested hours when the job has no time limit
  enforce_default_hours = true, -- give such a job a time limit of default_hours (what it was admitted for)
  gpu_types = {},           -- optional map from GRES type to bursar gpu_type, e.g. { h100 = "H100" }
  curl = "curl",            -- the curl binary
}

local NO_VAL = 4294967294
local NO_VAL16 = 65534
local INFINITE = 4294967295

local function script_dir()
  local src = debug.getinfo(1, "S").source or ""
  return (src:match("^@(.*/)") or "./")
end

do
  local path = os.getenv("BURSAR_SLURM_CONFIG") or (script_dir() .. "bursar.lua")
  local f = io.open(path, "r")
  if f then
    f:close()
    local ok, t = pcall(dofile, path)
    if ok and type(t) == "table" then
      for k, v in pairs(t) do CONFIG[k] = v end
    else
      slurm.log_error("job_submit/bursar: cannot read %s: %s", path, tostring(t))
    end
  end
end

-- JSON ------------------------------------------------------------------------------------------------

local function json_string(s)
  s = tostring(s)
  s = s:gsub('[%c"\\]', function(c)
    if c == '"' then return '\\"' end
    if c == "\\" then return "\\\\" end
    if c == "\n" then return "\\n" end
    if c == "\t" then return "\\t" end
    if c == "\r" then return "\\r" end
    return string.format("\\u%04x", string.byte(c))
  end)
  return '"' .. s .. '"'
end

-- Encodes a value; tables with a field `__order` are objects written in that key order, others arrays.
local function json(v)
  local t = type(v)
  if t == "string" then return json_string(v) end
  if t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then return "null" end
    if v == math.floor(v) and math.abs(v) < 1e15 then return string.format("%d", v) end
    return string.format("%.6g", v)
  end
  if t == "boolean" then return tostring(v) end
  if t == "table" then
    local parts = {}
    if v.__order then
      for _, k in ipairs(v.__order) do
        if v[k] ~= nil then parts[#parts + 1] = json_string(k) .. ":" .. json(v[k]) end
      end
      return "{" .. table.concat(parts, ",") .. "}"
    end
    for _, x in ipairs(v) do parts[#parts + 1] = json(x) end
    return "[" .. table.concat(parts, ",") .. "]"
  end
  return "null"
end

local function object(order) return { __order = order } end

-- A JSON decoder (RFC 8259), so the answer is read by field, whatever the order of its keys. Objects become
-- tables keyed by name, arrays tables indexed from 1, `null` becomes nil. Returns the value, or nil and the
-- reason with its byte position.
local json_decode
do
  local escapes = { ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t" }

  local function utf8(code)
    if code < 0x80 then return string.char(code) end
    if code < 0x800 then
      return string.char(0xC0 + math.floor(code / 0x40), 0x80 + code % 0x40)
    end
    if code < 0x10000 then
      return string.char(0xE0 + math.floor(code / 0x1000), 0x80 + math.floor(code / 0x40) % 0x40, 0x80 + code % 0x40)
    end
    return string.char(0xF0 + math.floor(code / 0x40000), 0x80 + math.floor(code / 0x1000) % 0x40,
      0x80 + math.floor(code / 0x40) % 0x40, 0x80 + code % 0x40)
  end

  local function fail(at, what) error({ at = at, what = what }, 0) end

  local function skip(s, i)
    local _, e = s:find("^[ \t\r\n]*", i)
    return e + 1
  end

  local value

  local function str(s, i)
    -- s:sub(i, i) == '"'
    local out, j = {}, i + 1
    while true do
      local c = s:sub(j, j)
      if c == "" then fail(j, "unterminated string") end
      if c == '"' then return table.concat(out), j + 1 end
      if c == "\\" then
        local e = s:sub(j + 1, j + 1)
        if e == "u" then
          local hex = s:sub(j + 2, j + 5)
          local code = hex:match("^%x%x%x%x$") and tonumber(hex, 16)
          if not code then fail(j, "bad \\u escape") end
          j = j + 6
          if code >= 0xD800 and code <= 0xDBFF and s:sub(j, j + 1) == "\\u" then
            local low = tonumber(s:sub(j + 2, j + 5), 16)
            if low and low >= 0xDC00 and low <= 0xDFFF then
              code = 0x10000 + (code - 0xD800) * 0x400 + (low - 0xDC00)
              j = j + 6
            end
          end
          out[#out + 1] = utf8(code)
        elseif escapes[e] then
          out[#out + 1] = escapes[e]
          j = j + 2
        else
          fail(j, "bad escape")
        end
      else
        local run = s:match('^[^"\\]+', j)
        out[#out + 1] = run
        j = j + #run
      end
    end
  end

  function value(s, i)
    i = skip(s, i)
    local c = s:sub(i, i)
    if c == "{" then
      local t = {}
      i = skip(s, i + 1)
      if s:sub(i, i) == "}" then return t, i + 1 end
      while true do
        if s:sub(i, i) ~= '"' then fail(i, "expected a key") end
        local k
        k, i = str(s, i)
        i = skip(s, i)
        if s:sub(i, i) ~= ":" then fail(i, "expected `:`") end
        t[k], i = value(s, i + 1)
        i = skip(s, i)
        local d = s:sub(i, i)
        if d == "}" then return t, i + 1 end
        if d ~= "," then fail(i, "expected `,` or `}`") end
        i = skip(s, i + 1)
      end
    elseif c == "[" then
      local t, n = {}, 0
      i = skip(s, i + 1)
      if s:sub(i, i) == "]" then return t, i + 1 end
      while true do
        n = n + 1
        t[n], i = value(s, i)
        i = skip(s, i)
        local d = s:sub(i, i)
        if d == "]" then return t, i + 1 end
        if d ~= "," then fail(i, "expected `,` or `]`") end
        i = i + 1
      end
    elseif c == '"' then
      return str(s, i)
    elseif s:sub(i, i + 3) == "true" then
      return true, i + 4
    elseif s:sub(i, i + 4) == "false" then
      return false, i + 5
    elseif s:sub(i, i + 3) == "null" then
      return nil, i + 4
    end
    local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", i)
    if num and #num > 0 and tonumber(num) then return tonumber(num), i + #num end
    fail(i, "unexpected `" .. c .. "`")
  end

  json_decode = function(s)
    if type(s) ~= "string" then return nil, "no text" end
    local ok, v, i = pcall(value, s, 1)
    if not ok then
      if type(v) == "table" then return nil, v.what .. " at byte " .. v.at end
      return nil, tostring(v)
    end
    if skip(s, i) <= #s then return nil, "trailing text at byte " .. skip(s, i) end
    return v
  end
end

-- Time ------------------------------------------------------------------------------------------------

local function days_from_civil(y, m, d)
  y = (m <= 2) and (y - 1) or y
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = math.floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

-- RFC 3339 ("2026-11-30T22:00:00Z", "...+08:00", fractions) to Unix seconds, or nil.
local function parse_rfc3339(s)
  if not s then return nil end
  local y, mo, d, h, mi, se, rest = s:match("^(%d%d%d%d)-(%d%d)-(%d%d)[T ](%d%d):(%d%d):(%d%d)(.*)$")
  if not y then return nil end
  rest = rest:gsub("^%.%d+", "")
  local off = 0
  if rest ~= "Z" and rest ~= "z" then
    local sign, oh, om = rest:match("^([+-])(%d%d):?(%d%d)$")
    if not sign then return nil end
    off = (tonumber(oh) * 3600 + tonumber(om) * 60) * (sign == "-" and -1 or 1)
  end
  local days = days_from_civil(tonumber(y), tonumber(mo), tonumber(d))
  return days * 86400 + tonumber(h) * 3600 + tonumber(mi) * 60 + tonumber(se) - off
end

-- Job description -> job.submitted ----------------------------------------------------------------------

local function set(v) return v ~= nil and v ~= NO_VAL and v ~= NO_VAL16 and v ~= INFINITE and v ~= "" end

-- GPUs in a TRES string such as "gres:gpu:h100:6,gres:nic:1" (or "gres/gpu=2"), and the GPU type if named.
local function gpus_in(s)
  if not s or s == "" then return 0, nil end
  local n, typ = 0, nil
  for item in s:gmatch("[^,]+") do
    local rest = item:match("^gres[:/]gpu(.*)$") or item:match("^gpu(.*)$")
    if rest then
      local count = tonumber(rest:match("[:=](%d+)$")) or 1
      local t = rest:match("^:([%a][%w_%-]*):%d+$") or rest:match("^:([%a][%w_%-]*)$")
      n = n + count
      typ = typ or t
    end
  end
  return n, typ
end

-- key=value pairs from a comment; values may not contain spaces or `;`.
local function pairs_in(s, into)
  if not s then return into end
  for word in s:gmatch("[^%s;]+") do
    local k, v = word:match("^([%w_%.%-]+)=(.*)$")
    if k then into[k:lower()] = v end
  end
  return into
end

local function truthy(v)
  if v == nil then return nil end
  v = v:lower()
  return v == "1" or v == "true" or v == "yes" or v == "y"
end

local function random_hex(n)
  local f = io.open("/proc/sys/kernel/random/uuid", "r")
  local u = f and f:read("*l") or ""
  if f then f:close() end
  u = u:gsub("-", "")
  if #u < n then u = u .. string.format("%x%x", os.time(), math.random(0, 0x7fffffff)) end
  return u:sub(1, n)
end

local KNOWN = {
  project = true, stage = true, dataset = true, image = true, script_hash = true, model_params_b = true,
  model_size = true, model = true, gpu_mem_gb = true, ready = true, deferrable = true, ready_image = true,
  ready_data = true, ready_script = true, mixed_precision = true, batch_size = true, dataloader_workers = true,
  interconnect = true, region = true, config = true, gpu_type = true, bursar_job = true,
}

local function build_event(job_desc, part_list, submit_uid, job_id)
  local kv = pairs_in(job_desc.comment, {})
  if job_desc.extra then pairs_in(job_desc.extra, kv) end

  local nodes = set(job_desc.min_nodes) and job_desc.min_nodes or 1
  if nodes < 1 then nodes = 1 end
  local per_node, t1 = gpus_in(job_desc.tres_per_node)
  local per_job, t2 = gpus_in(job_desc.tres_per_job)
  local per_task, t3 = gpus_in(job_desc.tres_per_task)
  local tasks = set(job_desc.num_tasks) and job_desc.num_tasks or 1
  local gpus = per_node * nodes + per_job + per_task * tasks
  local gres_type = t1 or t2 or t3
  local gpu_type = kv.gpu_type or (gres_type and (CONFIG.gpu_types[gres_type] or gres_type:upper())) or nil

  local hours = CONFIG.default_hours
  if set(job_desc.time_limit) then hours = job_desc.time_limit / 60 end
  if CONFIG.enforce_default_hours and not set(job_desc.time_limit) then
    -- Admitted for default_hours, so limited to them (a job without a limit would run unlimited).
    job_desc.time_limit = math.ceil(CONFIG.default_hours * 60)
  end

  local user = job_desc.user_name
  if not user or user == "" then user = "uid:" .. tostring(submit_uid) end
  local project = (set(job_desc.account) and job_desc.account) or kv.project or CONFIG.default_project

  local ready = object({ "image", "data", "script" })
  local declared = {}
  if kv.ready then
    for w in kv.ready:gmatch("[^,]+") do declared[w:lower()] = true end
  end
  for _, k in ipairs({ "image", "data", "script" }) do
    local explicit = truthy(kv["ready_" .. k])
    if explicit ~= nil then ready[k] = explicit else ready[k] = declared[k] == true or declared.all == true end
  end

  local tags = object({})
  for k, v in pairs(kv) do
    local key = k:match("^tag%.(.+)$") or ((not KNOWN[k]) and k or nil)
    if key then
      tags[key] = v
      tags.__order[#tags.__order + 1] = key
    end
  end
  table.sort(tags.__order)

  local job = object({ "id", "project", "user", "queue", "gpus", "gpu_type", "gpu_mem_gb", "nodes",
    "requested_hours", "stage", "model_params_b", "image", "dataset", "script_hash", "ready", "deferrable",
    "tags", "mixed_precision", "batch_size", "dataloader_workers", "interconnect", "region", "config",
    "name", "slurm" })
  job.id = job_id
  job.project = project
  job.user = user
  job.queue = set(job_desc.partition) and job_desc.partition or nil
  job.gpus = gpus
  job.gpu_type = gpu_type
  job.gpu_mem_gb = tonumber(kv.gpu_mem_gb or "")
  job.nodes = nodes
  job.requested_hours = hours
  job.stage = kv.stage
  job.model_params_b = tonumber((kv.model_params_b or kv.model_size or kv.model or ""):match("^([%d%.]+)") or "")
  job.image = kv.image
  job.dataset = kv.dataset
  job.script_hash = kv.script_hash
  job.ready = ready
  job.deferrable = truthy(kv.deferrable) or false
  job.tags = tags
  job.mixed_precision = truthy(kv.mixed_precision)
  job.batch_size = tonumber(kv.batch_size or "")
  job.dataloader_workers = tonumber(kv.dataloader_workers or "")
  job.interconnect = kv.interconnect
  job.region = kv.region
  job.config = kv.config
  job.name = job_desc.name
  local sl = object({ "submit_uid", "partition", "account", "time_limit_min", "tres_per_node", "tres_per_job" })
  sl.submit_uid = submit_uid
  sl.partition = job_desc.partition
  sl.account = job_desc.account
  sl.time_limit_min = set(job_desc.time_limit) and job_desc.time_limit or nil
  sl.tres_per_node = job_desc.tres_per_node
  sl.tres_per_job = job_desc.tres_per_job
  job.slurm = sl

  local ev = object({ "id", "time", "type", "job" })
  ev.id = "sub-" .. job_id
  ev.time = os.date("!%Y-%m-%dT%H:%M:%SZ")
  ev.type = "job.submitted"
  ev.job = job
  return json(ev)
end

-- The HTTP call -----------------------------------------------------------------------------------------

local function shell_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- POSTs `body` to CONFIG.url; returns the HTTP status (number, 0 when no answer) and the body.
local function post(body)
  local data = os.tmpname()
  local f = io.open(data, "w")
  if not f then return 0, "cannot write a temporary file" end
  f:write(body)
  f:close()
  local cfg = os.tmpname()
  local c = io.open(cfg, "w")
  if not c then os.remove(data); return 0, "cannot write a temporary file" end
  c:write('header = "Content-Type: application/json"\n')
  if CONFIG.token_file then
    local tf = io.open(CONFIG.token_file, "r")
    local token = tf and tf:read("*l")
    if tf then tf:close() end
    if token then c:write('header = "Authorization: Bearer ' .. token:gsub('[\\"]', "") .. '"\n') end
  end
  c:close()
  local cmd = string.format("%s -sS -m %s --connect-timeout %s -K %s --data-binary @%s -w '\\n%%{http_code}' %s 2>&1",
    CONFIG.curl, tostring(CONFIG.timeout), tostring(CONFIG.connect_timeout), shell_quote(cfg), shell_quote(data),
    shell_quote(CONFIG.url))
  local p = io.popen(cmd)
  local out = p and p:read("*a") or ""
  if p then p:close() end
  os.remove(data)
  os.remove(cfg)
  local text, code = out:match("^(.*)\n(%d%d%d)$")
  if not code then return 0, out end
  return tonumber(code), text
end

-- The hook ------------------------------------------------------------------------------------------------

local function unavailable(why, job_id)
  slurm.log_error("job_submit/bursar: no decision for %s: %s", job_id, why)
  if CONFIG.fail_open then
    slurm.log_user("bursar: no admission decision (%s); accepted because fail_open is set", why)
    return slurm.SUCCESS
  end
  slurm.log_user("bursar: job rejected: the admission service gave no decision (%s); try again shortly", why)
  return slurm.ESLURM_ACCESS_DENIED
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  local job_id = CONFIG.cluster .. "-" .. random_hex(12)
  local ok, body = pcall(build_event, job_desc, part_list, submit_uid, job_id)
  if not ok then return unavailable("cannot describe the job: " .. tostring(body), job_id) end

  local status, answer = post(body)
  local reply, unreadable = json_decode(answer)
  if status ~= 200 then
    local err = (type(reply) == "table" and type(reply.error) == "string" and reply.error)
      or tostring(answer):gsub("%s+$", "")
    return unavailable(status == 0 and ("bursar unreachable: " .. err) or ("HTTP " .. status .. ": " .. err), job_id)
  end
  if type(reply) ~= "table" then
    return unavailable("the answer is not JSON (" .. tostring(unreadable) .. ")", job_id)
  end
  local decision = reply.decision
  local reason = type(reply.reason) == "string" and reply.reason or ""
  local names = {}
  for _, p in ipairs(type(reply.policies) == "table" and reply.policies or {}) do names[#names + 1] = tostring(p) end
  local policies = table.concat(names, ", ")
  slurm.log_info("job_submit/bursar: %s %s -> %s (%s)", job_id, tostring(job_desc.name), tostring(decision), reason)

  local tag = "bursar_job=" .. job_id
  if set(job_desc.admin_comment) then tag = job_desc.admin_comment .. " " .. tag end

  if decision == "allow" then
    job_desc.admin_comment = tag
    return slurm.SUCCESS
  elseif decision == "deny" then
    slurm.log_user("bursar denied job %s: %s [%s]", job_id, reason, policies)
    return slurm.ESLURM_ACCESS_DENIED
  elseif decision == "require_approval" then
    job_desc.admin_comment = tag .. " bursar_hold=1"
    job_desc.priority = 0
    slurm.log_user("bursar: job %s is held until approved: %s [%s]", job_id, reason, policies)
    return slurm.SUCCESS
  elseif decision == "defer" then
    local until_s = reply["until"]
    local at = parse_rfc3339(until_s)
    if not at then return unavailable("defer without a readable `until` (" .. tostring(until_s) .. ")", job_id) end
    job_desc.admin_comment = tag
    job_desc.begin_time = at
    slurm.log_user("bursar: job %s deferred until %s: %s [%s]", job_id, until_s, reason, policies)
    return slurm.SUCCESS
  elseif decision == "alert" or decision == "reclaim" then
    job_desc.admin_comment = tag
    slurm.log_user("bursar: %s", reason)
    return slurm.SUCCESS
  end
  return unavailable("unknown decision `" .. tostring(decision) .. "`", job_id)
end

-- Users may not release a job bursar holds for approval (Slurm records a hold made at submission as a user
-- hold), nor grow a job after admission (the admission was for the size they asked); administrators (and
-- `bursar slurm enforce`, which runs as root) may.
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  if modify_uid == 0 then return slurm.SUCCESS end
  local held = tostring(job_rec.admin_comment or ""):find("bursar_hold=1", 1, true)
  if held and job_desc.priority ~= nil and job_desc.priority ~= NO_VAL then
    -- (slurm.log_user is not available in job_modify: the user sees "Access/permission denied".)
    slurm.log_info("job_submit/bursar: uid %s may not release job %s, which waits for approval in bursar",
      tostring(modify_uid), tostring(job_rec.job_id))
    return slurm.ESLURM_ACCESS_DENIED
  end
  if job_desc.tres_per_node or job_desc.tres_per_job or job_desc.tres_per_task or set(job_desc.min_nodes)
      or (set(job_desc.time_limit) and job_rec.time_limit and job_desc.time_limit > job_rec.time_limit) then
    slurm.log_info("job_submit/bursar: uid %s may not grow job %s after admission", tostring(modify_uid),
      tostring(job_rec.job_id))
    return slurm.ESLURM_ACCESS_DENIED
  end
  return slurm.SUCCESS
end

slurm.log_info("job_submit/bursar: loaded (url %s, timeout %ss, %s)", CONFIG.url, tostring(CONFIG.timeout),
  CONFIG.fail_open and "fail open" or "fail closed")
return slurm.SUCCESS
