--[[
job_submit.lua — Slurm admission through bursar (docs/integrations/slurm.md).

slurmctld calls slurm_job_submit() for every submission, before the job has a Slurm job id. This script
turns the job description into a bursar v1 `job.submitted` event, asks `bursar serve` for the admission
decision, and maps the answer onto Slurm. Lua calls are serialised inside slurmctld, so the question costs
every other submission its time: with `socket` set (serve's `--socket`, Debian's lua-socket installed) the
hook keeps one connection to serve's event socket open and writes the event as a line, reconnecting once
when serve restarted — no process is started per submission; without it, it asks POST /v1/admit through
curl (a fork, an exec and a TCP connection each time: about 10-19 ms of slurmctld's time, docs/perf/slurm.md).
`--test-only` submissions always go over HTTP (`?test_only=true`: the socket has no preview). The answer:

  allow            -> accept
  deny             -> reject (ESLURM_ACCESS_DENIED), bursar's reason shown by sbatch
  require_approval -> accept held (priority 0, an admin hold); `bursar slurm enforce` releases it when
                      bursar streams the approval
  defer            -> accept with a begin time (`until`)
  no answer        -> reject (fail closed, the default) or accept (fail_open = true, marked
                      bursar_unadmitted=1)

What is reserved is a conservative estimate of what Slurm will allocate: `--exclusive` takes its nodes'
GPUs (the largest node of its partition, from the file `bursar slurm watch` writes; `node_gpus` or
`partition_node_gpus` override it), a node range (`-N 1-2`) its maximum, `--gpus-per-socket` every socket, an array
(`--array=0-99%4`) every task (`job.array`: GPU-hours for all tasks, concurrent GPUs for the throttle).
A MIG slice (a GRES type naming a profile: `--gres=gpu:1g.10gb:2`) is its share of a GPU, 2/7 here, sent
as `"gpus":"2/7"` (whole counts stay JSON integers); `mig_shares` overrides a profile's share.
`bursar slurm watch` reports what Slurm really allocated when each run starts, and bursar corrects the
reservation. Each admission promises a confirmation (`confirm_within_s`): a job Slurm never creates (a
rejected partition, a denied heterogeneous component) is released after that long.

The job gets a bursar job id (`<cluster>-<12 hex>`; heterogeneous components `<id>+<offset>`) generated
here; it is stored in the job's AdminComment as `bursar_job=<id>`, which only administrators can change.
`bursar slurm watch` reads it back, so the audit log links bursar's id to Slurm's.

`sbatch --test-only` (and srun/salloc --test-only) is marked by cli_filter.lua (`bursar_test_only=1` in
the comment): the hook then asks `POST /v1/admit?test_only=true`, which answers without reserving
anything. A real job carrying the marker (typed by hand) is accepted held and never released: it was
never reserved, so it never runs in bursar's name.

slurm_job_modify: a user may not release a job bursar holds, grow it, or put `bursar_` words in its
text; a user's partition change is admitted again (the new admission replaces the old one, its id in
the Comment as `bursar_readmit=<id>`) or refused; an administrator's release of a held job is recorded
(`bursar_released_by=<user>`) so the watcher reports it as an override.

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
  confirm_within_s = 900,   -- the watcher confirms every admitted job within this many seconds, or
                            -- bursar releases it; keep it well above the watcher's interval and restart time
  -- What --exclusive reserves per node: partition_node_gpus[partition], else node_gpus, else the
  -- partition's largest node in node_gpus_file, which `bursar slurm watch` writes from Slurm's node
  -- records (its --node-gpus-file; by default beside its --state, named after it). A job naming no
  -- partition takes the default partition's (the largest node of all when that is not in the file), a
  -- partition not in the file the largest node of all. With no setting and no readable file an
  -- --exclusive job gets no decision: rejected, or accepted unadmitted with fail_open.
  node_gpus = nil,          -- override: GPUs of any node (nil: read node_gpus_file)
  partition_node_gpus = {}, -- override per partition: { a100 = 4, h100 = 8 }
  node_gpus_file = nil,     -- lines `partition<TAB>gpus`; nil: the first that can be read of
                            -- /run/bursar-slurm/node-gpus.tsv (the Debian package's watcher writes it)
                            -- and /var/lib/bursar/slurm-watch.node-gpus.tsv (the watcher's default)
  node_gpus_file_every = 5, -- seconds between two reads of node_gpus_file (0: at every --exclusive job)
  sockets_per_node = 2,     -- for --gpus-per-socket without --sockets-per-node
  curl = "curl",            -- the curl binary
  socket = nil,             -- serve's event socket (`bursar serve --socket PATH`): one kept connection, no
                            -- process per submission (needs Debian's lua-socket); nil: HTTP through curl
  estimate = true,          -- tell the user when an admitted job is expected to start (asks ?estimate=true
                            -- over HTTP and for --test-only; the socket answers without an estimate)
  -- A GRES type holding a MIG profile (`1g.10gb`, AutoDetect's `a100_1g.10gb`) counts as its share of a
  -- GPU: compute slices over 7, over 4 for the A30's `1g.6gb`/`2g.12gb`/`4g.24gb` (as bursar's
  -- mig_share). This table overrides the share of a profile or of a whole GRES type name, e.g.
  -- { ["1g.10gb"] = "1/7", mig_small = "1/7" }: a fraction, a decimal or a number, exact in 840ths of a
  -- GPU (an inexact one is logged and ignored). `bursar slurm watch` counts what Slurm allocated by the
  -- built-in shares only: an override that differs is corrected when the job starts.
  mig_shares = {},
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

-- GPU counts ------------------------------------------------------------------------------------------
-- Counted exactly, as bursar does (bursar_model::Gpus): in 840ths of a GPU, so that MIG slices (sevenths,
-- quarters) add up to exact fractions. Sent as a JSON integer when whole (as before), else a string "2/7".

local PARTS = 840

local function gcd(a, b)
  while b ~= 0 do a, b = b, a % b end
  return a
end

-- A count in 840ths as bursar writes it: `8`, `2/7` (lowest terms), `9/7`.
local function gpus_text(parts)
  if parts % PARTS == 0 then return string.format("%d", parts / PARTS) end
  local g = gcd(parts, PARTS)
  return string.format("%d/%d", parts / g, PARTS / g)
end

-- A count in 840ths as the event's `gpus`: a number when whole, the text `2/7` otherwise.
local function gpus_value(parts)
  if parts % PARTS == 0 then return parts / PARTS end
  return gpus_text(parts)
end

-- A count given as a number or text (`3`, `2/7`, `0.5`) in 840ths; nil when it is none, negative, or
-- not a whole number of 840ths (`1/9`, `0.2857`).
local function parts_of(v)
  if type(v) == "number" then
    if v ~= v or v < 0 or v == math.huge then return nil end
    local p = v * PARTS
    local r = math.floor(p + 0.5)
    if math.abs(p - r) > 1e-6 then return nil end
    return r
  end
  if type(v) ~= "string" then return nil end
  local n, d = v:match("^%s*(%d+)%s*/%s*(%d+)%s*$")
  if n then
    n, d = tonumber(n), tonumber(d)
    if d == 0 or (n * PARTS) % d ~= 0 then return nil end
    return n * PARTS / d
  end
  local x = v:match("^%s*(%d+%.?%d*)%s*$") or v:match("^%s*(%.%d+)%s*$")
  return x and parts_of(tonumber(x)) or nil
end

-- The first MIG profile `<n>g.<m>gb` in a name, starting a word (`1g.10gb`, `a100_1g.10gb`,
-- `1g.5gb+me`; not `x1g.10gb`): its compute slices, memory GB and text, as bursar_model::mig_profile.
local function mig_profile(name)
  local init = 1
  while true do
    local s, e, digits, mem = name:find("(%d+)g%.(%d+)[gG][bB]", init)
    if not s then return nil end
    local slices = tonumber(digits)
    if (s == 1 or not name:sub(s - 1, s - 1):match("%w")) and slices > 0 then
      return slices, tonumber(mem), name:sub(s, e)
    end
    init = s + #digits
  end
end

-- mig_shares, read into 840ths once at load.
local mig_overrides = {}
for k, v in pairs(type(CONFIG.mig_shares) == "table" and CONFIG.mig_shares or {}) do
  local p = parts_of(v)
  if p and p > 0 and p <= PARTS then
    mig_overrides[tostring(k)] = p
  else
    slurm.log_error("job_submit/bursar: mig_shares[%s] = %s is not a share of one GPU exact in 840ths (e.g. \"1/7\"); ignored",
      tostring(k), tostring(v))
  end
end

-- The share of a GPU one unit of a GRES type is, in 840ths, when it is a MIG slice: mig_shares[type],
-- else mig_shares[profile], else the profile's compute slices over 7 (over 4 for the A30's profiles,
-- 6 GB a slice), as bursar_model::mig_share. nil for a whole GPU (no profile, or more slices than a GPU has).
local function mig_parts(gres_type)
  if mig_overrides[gres_type] then return mig_overrides[gres_type] end
  local slices, mem, profile = mig_profile(gres_type)
  if not slices then return nil end
  if mig_overrides[profile] then return mig_overrides[profile] end
  local of = (mem == slices * 6) and 4 or 7
  if slices > of then return nil end
  return slices * PARTS / of
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

-- GPUs, in 840ths, in a TRES string such as "gres:gpu:h100:6,gres:nic:1" (or "gres/gpu=2"), and the
-- GPU type if named. A type holding a MIG profile ("gres:gpu:1g.10gb:2", "gres/gpu:a100_1g.10gb=2")
-- counts as its share ([mig_parts]): two 1g.10gb are 2/7 of a GPU, not 2 GPUs.
local function gpus_in(s)
  if not s or s == "" then return 0, nil end
  local n, typ = 0, nil
  for item in s:gmatch("[^,]+") do
    local rest = item:match("^gres[:/]gpu(.*)$") or item:match("^gpu(.*)$")
    if rest then
      local count = tonumber(rest:match("[:=](%d+)$")) or 1
      local t = rest:match("^:([%a][%w_%-]*):%d+$") or rest:match("^:([%a][%w_%-]*)$")
      local named = rest:match("^:([^:=]+)[:=]%d+$") or rest:match("^:([^:=]+)$")
      local share = named and mig_parts(named)
      if share then
        n = n + count * share
        t = named
      else
        n = n + count * PARTS
      end
      typ = typ or t
    end
  end
  return n, typ
end

-- Tasks and throttle of an array index: "0-9%3", "1,3,5-7", "0-15:4", "[1-5:2]%2". Returns nil for
-- a job that is no array, or nil and the reason for an index that cannot be read.
local function array_of(inx)
  if not inx or inx == "" then return nil end
  local spec, throttle = inx:match("^%[?([^%%%]]*)%]?%%(%d+)$")
  if not spec then spec = inx:match("^%[?([^%%%]]*)%]?$") end
  if not spec or spec == "" then return nil, "unreadable --array `" .. inx .. "`" end
  local tasks = 0
  for item in spec:gmatch("[^,]+") do
    local a, b, step = item:match("^(%d+)%-(%d+):(%d+)$")
    if not a then a, b = item:match("^(%d+)%-(%d+)$") end
    if not a then a = item:match("^(%d+)$"); b = a end
    if not a then return nil, "unreadable --array item `" .. item .. "`" end
    a, b, step = tonumber(a), tonumber(b), tonumber(step or 1)
    if b < a or step < 1 then return nil, "empty --array range `" .. item .. "`" end
    tasks = tasks + math.floor((b - a) / step) + 1
  end
  local t = object({ "tasks", "max_running" })
  t.tasks = tasks
  local m = tonumber(throttle or "")
  if m and m > 0 then t.max_running = m end
  return t
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

-- The marker cli_filter.lua adds to a --test-only submission's comment.
local TEST_ONLY = "bursar_test_only=1"

local KNOWN = {
  project = true, stage = true, dataset = true, image = true, script_hash = true, model_params_b = true,
  model_size = true, model = true, gpu_mem_gb = true, ready = true, deferrable = true, ready_image = true,
  ready_data = true, ready_script = true, mixed_precision = true, batch_size = true, dataloader_workers = true,
  interconnect = true, region = true, config = true, gpu_type = true, bursar_job = true, bursar_test_only = true,
  bursar_readmit = true,
}

-- `s` without the words `drop` (a word, or a prefix ending in `=`).
local function without_word(s, drop)
  local out = {}
  local prefix = drop:sub(-1) == "="
  for w in tostring(s or ""):gmatch("%S+") do
    local hit = (prefix and w:sub(1, #drop) == drop) or (not prefix and w == drop)
    if not hit then out[#out + 1] = w end
  end
  return table.concat(out, " ")
end

-- The value of `word` (`bursar_job=`) in a text, if present.
local function word_value(s, word)
  for w in tostring(s or ""):gmatch("%S+") do
    if w:sub(1, #word) == word and #w > #word then return w:sub(#word + 1) end
  end
  return nil
end

-- Whether text a user wrote holds a word only the hook may write (`bursar_…`, `AdminComment=`): the
-- watcher reads bursar's marks out of `scontrol show job`, where user text sits beside them.
local function reserved(s)
  if not s then return false end
  s = tostring(s)
  return s:find("bursar_", 1, true) ~= nil or s:find("AdminComment=", 1, true) ~= nil
end

-- The first user-written field of a job description holding reserved words, by name.
local function reserved_field(d)
  if reserved(without_word(d.comment, TEST_ONLY)) then return "comment" end
  for _, f in ipairs({ "name", "work_dir", "std_out", "std_err", "std_in", "extra", "mail_user", "features",
      "licenses", "reservation", "wckey" }) do
    local ok, v = pcall(function() return d[f] end)
    if ok and type(v) == "string" and reserved(v) then return f end
  end
  return nil
end

-- The largest node's GPUs per partition, from node_gpus_file (`partition<TAB>gpus` lines, `#`
-- comments; a line of any other shape is skipped, nothing in it is run). Read again at most every
-- node_gpus_file_every seconds (slurmctld keeps this script loaded; Lua 5.1 has no stat, so a cheap
-- re-read stands in for an mtime check). Returns { by = {partition = gpus}, max = gpus }, or nil and why.
local node_file = { at = nil, known = nil, why = nil }

-- Where the watcher writes the file when node_gpus_file names none: the Debian package's service
-- (a directory SlurmUser may read), then the watcher's default beside its state file.
local NODE_GPUS_FILES = { "/run/bursar-slurm/node-gpus.tsv", "/var/lib/bursar/slurm-watch.node-gpus.tsv" }

local function read_node_gpus()
  local paths = CONFIG.node_gpus_file and { CONFIG.node_gpus_file } or NODE_GPUS_FILES
  local f, err, path
  for _, p in ipairs(paths) do
    path = p
    f, err = io.open(p, "r")
    if f then break end
  end
  if not f then return nil, "cannot read " .. table.concat(paths, " or ") .. " (" .. tostring(err) .. ")" end
  local text = f:read(1048576) or ""
  f:close()
  local known, lines = { by = {}, max = nil }, 0
  for line in text:gmatch("[^\n]+") do
    local p, n = line:match("^([^%s#][^\t]*)\t(%d+)%s*$")
    n = tonumber(n or "")
    if p and n and n < 1000000 then
      known.by[p] = n
      if not known.max or n > known.max then known.max = n end
      lines = lines + 1
    end
  end
  if lines == 0 then return nil, tostring(path) .. " lists no partition" end
  return known
end

local function node_gpus_known()
  local now = os.time()
  if not node_file.at or now - node_file.at >= (CONFIG.node_gpus_file_every or 0) or now < node_file.at then
    node_file.known, node_file.why = read_node_gpus()
    node_file.at = now
  end
  return node_file.known, node_file.why
end

-- The partition Slurm gives a job that names none: the one part_list (the partitions the user may use,
-- keyed by name) flags as default, or nil.
local function default_partition(part_list)
  if type(part_list) ~= "table" then return nil end
  for name, part in pairs(part_list) do
    local ok, flag = pcall(function() return part.flag_default end)
    if ok and flag and flag ~= 0 and flag ~= false then return name end
  end
  return nil
end

-- GPUs of one node an --exclusive job may be given: the most over the partitions it names
-- (`-p a,b`), or its default partition's. Raises an error when nothing says (no override, no file).
local function whole_node_of(d, part_list)
  local names = {}
  if set(d.partition) then
    for p in tostring(d.partition):gmatch("[^,]+") do names[#names + 1] = p end
  end
  if #names == 0 then names[1] = default_partition(part_list) or false end
  local whole = nil
  for _, p in ipairs(names) do
    local n = (p and CONFIG.partition_node_gpus[p]) or CONFIG.node_gpus
    if not n then
      local known, why = node_gpus_known()
      if not known then
        error("--exclusive needs the GPUs of a node: node_gpus is not set and " .. why
          .. " (written by `bursar slurm watch`, see its --node-gpus-file)", 0)
      end
      n = (p and known.by[p]) or known.max
    end
    if not whole or n > whole then whole = n end
  end
  return whole or 0
end

-- GPUs the job may hold at once, in 840ths, estimated high: exclusive nodes whole, node ranges at their
-- maximum, per-socket GPUs on every socket.
local function gpus_of(d, part_list)
  local nodes = set(d.min_nodes) and d.min_nodes or 1
  if set(d.max_nodes) and d.max_nodes > nodes then nodes = d.max_nodes end
  if nodes < 1 then nodes = 1 end
  local per_node, t1 = gpus_in(d.tres_per_node)
  local per_job, t2 = gpus_in(d.tres_per_job)
  local per_task, t3 = gpus_in(d.tres_per_task)
  local per_socket, t4 = gpus_in(d.tres_per_socket)
  local tasks = set(d.num_tasks) and d.num_tasks or 1
  local sockets = set(d.sockets_per_node) and d.sockets_per_node or CONFIG.sockets_per_node
  local gpus = per_node * nodes + per_job + per_task * tasks + per_socket * sockets * nodes
  if d.shared == 0 then
    local whole = whole_node_of(d, part_list) * PARTS
    if whole * nodes > gpus then gpus = whole * nodes end
  end
  return gpus, nodes, t1 or t2 or t3 or t4
end

-- The job.submitted of a job description; `extra` says what Slurm's description lacks (a
-- heterogeneous group, a re-admission's old id, user and admitted GPUs, a test-only submission, the
-- partitions the user may use for a job naming none).
-- Returns the JSON and the GPUs reserved (as bursar writes them: `8`, `2/7`).
local function build_event(job_desc, submit_uid, job_id, extra)
  extra = extra or {}
  local kv = pairs_in(job_desc.comment, {})
  if job_desc.extra then pairs_in(job_desc.extra, kv) end

  local gpus, nodes, gres_type = gpus_of(job_desc, extra.part_list)
  if extra.gpus and extra.gpus > gpus then gpus = extra.gpus end -- (both in 840ths)
  local gpu_type = kv.gpu_type or (gres_type and (CONFIG.gpu_types[gres_type] or gres_type:upper())) or nil
  local array, bad_array = array_of(job_desc.array_inx)
  if bad_array then error(bad_array, 0) end

  local hours = CONFIG.default_hours
  if set(job_desc.time_limit) then hours = job_desc.time_limit / 60 end
  if CONFIG.enforce_default_hours and not set(job_desc.time_limit) and not extra.modify then
    -- Admitted for default_hours, so limited to them (a job without a limit would run unlimited).
    job_desc.time_limit = math.ceil(CONFIG.default_hours * 60)
  end

  local user = job_desc.user_name
  if (not user or user == "") and extra.user then user = extra.user end
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
    "replaces", "array", "confirm_within_s", "name", "slurm" })
  job.id = job_id
  job.project = project
  job.user = user
  job.queue = set(job_desc.partition) and job_desc.partition or nil
  job.gpus = gpus_value(gpus)
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
  -- A partition change admitted again: the job it replaces sets aside its GPUs while this is judged (v1.x).
  job.replaces = extra.replaces
  job.array = array
  if not extra.test_only then job.confirm_within_s = CONFIG.confirm_within_s end
  job.name = job_desc.name
  local sl = object({ "submit_uid", "partition", "account", "time_limit_min", "tres_per_node", "tres_per_job",
    "tres_per_socket", "exclusive", "min_nodes", "max_nodes", "array", "het", "replaces" })
  sl.submit_uid = submit_uid
  sl.partition = job_desc.partition
  sl.account = job_desc.account
  sl.time_limit_min = set(job_desc.time_limit) and job_desc.time_limit or nil
  sl.tres_per_node = job_desc.tres_per_node
  sl.tres_per_job = job_desc.tres_per_job
  sl.tres_per_socket = job_desc.tres_per_socket
  if job_desc.shared == 0 then sl.exclusive = true end
  sl.min_nodes = set(job_desc.min_nodes) and job_desc.min_nodes or nil
  sl.max_nodes = set(job_desc.max_nodes) and job_desc.max_nodes or nil
  sl.array = job_desc.array_inx
  sl.het = extra.het
  sl.replaces = extra.replaces
  job.slurm = sl

  local ev = object({ "id", "time", "type", "job" })
  ev.id = "sub-" .. job_id
  ev.time = os.date("!%Y-%m-%dT%H:%M:%SZ")
  ev.type = "job.submitted"
  ev.job = job
  return json(ev), gpus_text(gpus)
end

-- The HTTP call -----------------------------------------------------------------------------------------

local function shell_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- POSTs `body` to CONFIG.url (plus `query`); returns the HTTP status (number, 0 when no answer) and the body.
local function post(body, query)
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
    shell_quote(CONFIG.url .. (query or "")))
  local p = io.popen(cmd)
  local out = p and p:read("*a") or ""
  if p then p:close() end
  os.remove(data)
  os.remove(cfg)
  local text, code = out:match("^(.*)\n(%d%d%d)$")
  if not code then return 0, out end
  return tonumber(code), text
end

-- The socket transport: one connection to serve's event socket, kept between submissions (slurmctld
-- keeps this script loaded), opened again when serve restarted. A line out, one answer line back.
-- socket.core first: loading it makes a write to a connection serve closed an error, not a SIGPIPE
-- (outside slurmctld, which ignores SIGPIPE itself, the signal would end the process).
local unix_loaded, unix = pcall(function()
  require("socket")
  return require("socket.unix")
end)
local conn = nil

local function socket_send(line)
  if not unix_loaded then
    return nil, "`socket` is set but Lua cannot load socket.unix (apt-get install lua-socket): " .. tostring(unix)
  end
  local last = "no answer"
  -- A second try only when the kept connection turned out closed (serve restarted): the same line again,
  -- whose id makes a repeat harmless.
  for _ = 1, 2 do
    local fresh = false
    if not conn then
      local c = unix()
      c:settimeout(CONFIG.connect_timeout)
      local ok, err = c:connect(CONFIG.socket)
      if not ok then
        c:close()
        return nil, "cannot connect to " .. CONFIG.socket .. ": " .. tostring(err)
      end
      conn, fresh = c, true
    end
    conn:settimeout(CONFIG.timeout)
    local sent, err = conn:send(line .. "\n")
    local answer
    if sent then answer, err = conn:receive("*l") end
    if answer then return answer end
    conn:close()
    conn = nil
    last = tostring(err)
    -- A timeout on a fresh connection is serve being slow, not gone: no second try.
    if fresh or err == "timeout" then break end
  end
  return nil, last
end

-- Asks over the socket; returns the admission decision as POST /v1/admit would, or nil and why. A resent
-- line (the same id after a reconnection) is answered `duplicate` without its decision: that one is asked
-- over HTTP, which answers the decision made the first time.
local function ask_socket(body)
  local line, why = socket_send(body)
  if not line then return nil, "bursar unreachable over " .. tostring(CONFIG.socket) .. ": " .. why end
  local reply, unreadable = json_decode(line)
  if type(reply) ~= "table" then return nil, "the socket's answer is not JSON (" .. tostring(unreadable) .. ")" end
  if type(reply.error) == "string" then return nil, "bursar refused the submission: " .. reply.error end
  if reply.duplicate then return nil, "resent" end
  for _, d in ipairs(type(reply.decisions) == "table" and reply.decisions or {}) do
    if type(d) == "table" and d.admission then return d end
  end
  return nil, "the socket's answer holds no admission decision"
end

-- Asks bursar; returns the decoded answer, or nil and why there is none.
local function ask(body, query)
  if CONFIG.socket and not query then
    local reply, why = ask_socket(body)
    if reply or why ~= "resent" then return reply, why end
  end
  local status, answer = post(body, query)
  local reply, unreadable = json_decode(answer)
  if status ~= 200 then
    local err = (type(reply) == "table" and type(reply.error) == "string" and reply.error)
      or tostring(answer):gsub("%s+$", "")
    return nil, status == 0 and ("bursar unreachable: " .. err) or ("HTTP " .. status .. ": " .. err)
  end
  if type(reply) ~= "table" then
    return nil, "the answer is not JSON (" .. tostring(unreadable) .. ")"
  end
  return reply
end

-- `in about 40 min`, `now`, `in about 3 h 10 min`, `in about 3 days` (bursar_model::api::about's words).
local function about(wait_s)
  if wait_s < 60 then return "now" end
  local m = math.floor((wait_s + 30) / 60)
  if m < 60 then return "in about " .. m .. " min" end
  if m < 48 * 60 then return "in about " .. math.floor(m / 60) .. " h " .. (m % 60) .. " min" end
  return "in about " .. math.floor((m + 720) / 1440) .. " days"
end

-- `expected start in about 40 min in cn-north / gpu` from an answer's `estimate`, or nil.
local function expected(reply)
  local e = reply.estimate
  if type(e) ~= "table" or type(e.wait_s) ~= "number" then return nil end
  local place = tostring(e.region or "?")
  if type(e.queue) == "string" and e.queue ~= "" then place = place .. " / " .. e.queue end
  return "expected start " .. about(e.wait_s) .. " in " .. place
end

local function policies_of(reply)
  local names = {}
  for _, p in ipairs(type(reply.policies) == "table" and reply.policies or {}) do names[#names + 1] = tostring(p) end
  return table.concat(names, ", ")
end

-- The hook ------------------------------------------------------------------------------------------------

local function unavailable(why, job_id, job_desc)
  slurm.log_error("job_submit/bursar: no decision for %s: %s", job_id, why)
  if CONFIG.fail_open then
    slurm.log_user("bursar: no admission decision (%s); accepted because fail_open is set", why)
    -- Marked, so the watcher can say which jobs ran without an admission.
    local mark = "bursar_unadmitted=1"
    job_desc.admin_comment = set(job_desc.admin_comment) and (job_desc.admin_comment .. " " .. mark) or mark
    return slurm.SUCCESS
  end
  slurm.log_user("bursar: job rejected: the admission service gave no decision (%s); try again shortly", why)
  return slurm.ESLURM_ACCESS_DENIED
end

-- The components of one heterogeneous submission come one after another, offset 0 first, within one
-- RPC of slurmctld (Lua calls are serialised): the first names the group.
local het_group = nil

function slurm_job_submit(job_desc, part_list, submit_uid)
  local job_id = CONFIG.cluster .. "-" .. random_hex(12)
  local extra = {}
  local offset = job_desc.het_job_offset
  if set(offset) then
    if offset == 0 or not het_group then het_group = job_id end
    if offset > 0 then job_id = het_group .. "+" .. tostring(offset) end
    local het = object({ "group", "offset" })
    het.group = het_group
    het.offset = offset
    extra.het = het
  end
  local field = reserved_field(job_desc)
  if field then
    slurm.log_user("bursar: job rejected: its %s holds a word only bursar may write (`bursar_...` or `AdminComment=`)", field)
    return slurm.ESLURM_ACCESS_DENIED
  end
  local test_only = tostring(job_desc.comment or ""):find(TEST_ONLY, 1, true) ~= nil
  extra.test_only = test_only
  extra.part_list = part_list
  local ok, body, gpus = pcall(build_event, job_desc, submit_uid, job_id, extra)
  if not ok then return unavailable("cannot describe the job: " .. tostring(body), job_id, job_desc) end

  -- Over HTTP the answer can say when the job is expected to start; the socket stays as fast as it is.
  local query = nil
  if test_only then
    query = "?test_only=true" .. (CONFIG.estimate and "&estimate=true" or "")
  elseif CONFIG.estimate and not CONFIG.socket then
    query = "?estimate=true"
  end
  local reply, why = ask(body, query)
  if not reply then return unavailable(why, job_id, job_desc) end
  local decision = reply.decision
  local reason = type(reply.reason) == "string" and reply.reason or ""
  local policies = policies_of(reply)
  slurm.log_info("job_submit/bursar: %s %s -> %s (%s)%s", job_id, tostring(job_desc.name), tostring(decision), reason,
    test_only and " [test only]" or "")

  if test_only then
    -- A will-run test (Slurm creates nothing) or a forged marker (a real job): either way nothing was
    -- reserved, so what is accepted is held for good and carries no bursar id.
    if decision == "deny" then
      slurm.log_user("bursar would deny this job: %s [%s]", reason, policies)
      return slurm.ESLURM_ACCESS_DENIED
    end
    local when = expected(reply)
    slurm.log_user("bursar would answer %s%s (test only: nothing reserved)%s", tostring(decision),
      reason ~= "" and (": " .. reason) or "", when and ("; " .. when) or "")
    job_desc.priority = 0
    job_desc.admin_comment = TEST_ONLY
    return slurm.SUCCESS
  end

  local tag = "bursar_job=" .. job_id .. " bursar_gpus=" .. gpus
  if set(job_desc.admin_comment) then tag = job_desc.admin_comment .. " " .. tag end

  if decision == "allow" then
    job_desc.admin_comment = tag
    local when = expected(reply)
    if when then slurm.log_user("bursar: job %s admitted; %s", job_id, when) end
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
    if not at then return unavailable("defer without a readable `until` (" .. tostring(until_s) .. ")", job_id, job_desc) end
    job_desc.admin_comment = tag
    job_desc.begin_time = at
    slurm.log_user("bursar: job %s deferred until %s: %s [%s]", job_id, until_s, reason, policies)
    return slurm.SUCCESS
  elseif decision == "alert" or decision == "reclaim" then
    job_desc.admin_comment = tag
    slurm.log_user("bursar: %s", reason)
    return slurm.SUCCESS
  end
  return unavailable("unknown decision `" .. tostring(decision) .. "`", job_id, job_desc)
end

-- The user names of UIDs, looked up once each (a `getent` child the first time a UID modifies a job, none
-- after: the hook stays loaded in slurmctld).
local users = {}

local function user_of(uid)
  local n = tonumber(uid)
  if not n then return "uid:" .. tostring(uid) end
  if users[n] then return users[n] end
  local p = io.popen("getent passwd " .. string.format("%d", n) .. " 2>/dev/null")
  local line = p and p:read("*l") or ""
  if p then p:close() end
  local name = line:match("^([^:]+):")
  if name then users[n] = name end
  return name or ("uid:" .. string.format("%d", n))
end

-- A user's partition change, admitted again as a new bursar job. Slurm refuses a user's change of the
-- AdminComment ("Attempt to change admin_comment"), so the new id goes into the Comment as
-- `bursar_readmit=<id>`, where the hook polices every bursar_ word; the watcher then ends the old
-- admission as replaced and confirms the new one.
local function readmit(job_desc, job_rec, modify_uid)
  if (job_rec.array_job_id and job_rec.array_job_id ~= 0) or (job_rec.het_job_id and job_rec.het_job_id ~= 0) then
    slurm.log_info("job_submit/bursar: uid %s may not move array or heterogeneous job %s to another partition",
      tostring(modify_uid), tostring(job_rec.job_id))
    return slurm.ESLURM_ACCESS_DENIED
  end
  local old = word_value(job_rec.comment, "bursar_readmit=") or word_value(job_rec.admin_comment, "bursar_job=")
  if not old then return slurm.SUCCESS end -- not bursar's job
  local comment = job_desc.comment or job_rec.comment
  local view = {
    comment = comment, partition = job_desc.partition, account = job_rec.account,
    tres_per_node = job_rec.tres_per_node, tres_per_job = job_rec.tres_per_job, tres_per_task = job_rec.tres_per_task,
    tres_per_socket = job_rec.tres_per_socket, min_nodes = job_rec.min_nodes, max_nodes = job_rec.max_nodes,
    time_limit = set(job_desc.time_limit) and job_desc.time_limit or job_rec.time_limit, name = job_rec.name,
    shared = NO_VAL16, num_tasks = NO_VAL, sockets_per_node = NO_VAL16,
  }
  local admitted = parts_of(word_value(job_rec.admin_comment, "bursar_gpus="))
  local job_id = CONFIG.cluster .. "-" .. random_hex(12)
  local ok, body = pcall(build_event, view, modify_uid, job_id,
    { modify = true, gpus = admitted, replaces = old, user = user_of(job_rec.user_id) })
  if not ok then
    slurm.log_error("job_submit/bursar: cannot describe job %s for its new partition: %s", tostring(job_rec.job_id), tostring(body))
    return slurm.ESLURM_ACCESS_DENIED
  end
  local reply, why = ask(body)
  if not reply then
    slurm.log_error("job_submit/bursar: no decision for moving job %s: %s", tostring(job_rec.job_id), why)
    return slurm.ESLURM_ACCESS_DENIED
  end
  if reply.decision ~= "allow" and reply.decision ~= "alert" then
    -- A deny, or what would need a hold or a begin time a user's update cannot set: refused.
    slurm.log_info("job_submit/bursar: uid %s may not move job %s to %s: %s (%s)", tostring(modify_uid),
      tostring(job_rec.job_id), tostring(job_desc.partition), tostring(reply.decision), tostring(reply.reason))
    return slurm.ESLURM_ACCESS_DENIED
  end
  job_desc.comment = (without_word(comment, "bursar_readmit=") .. " bursar_readmit=" .. job_id):gsub("^ ", "")
  slurm.log_info("job_submit/bursar: job %s moved to %s, admitted again as %s (replaces %s)", tostring(job_rec.job_id),
    tostring(job_desc.partition), job_id, old)
  return slurm.SUCCESS
end

-- Users may not release a job bursar holds for approval (Slurm records a hold made at submission as a user
-- hold), nor grow a job after admission (the admission was for the size they asked), nor write bursar's
-- words; a user's partition change is admitted again. Administrators (and `bursar slurm enforce`, which
-- runs as root) may do the rest, and an administrator's release of a held job is recorded.
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  local admin = tostring(job_rec.admin_comment or "")
  local releasing = job_desc.priority ~= nil and job_desc.priority ~= NO_VAL and job_desc.priority ~= 0
  if admin:find(TEST_ONLY, 1, true) and releasing then
    slurm.log_info("job_submit/bursar: job %s carries the --test-only marker: it was never reserved and stays held",
      tostring(job_rec.job_id))
    return slurm.ESLURM_ACCESS_DENIED
  end
  local held = admin:find("bursar_hold=1", 1, true) ~= nil
  if modify_uid == 0 then
    -- The enforcer clears bursar_hold=1 before it releases: a release while the marker is set is
    -- someone else's, recorded for the watcher (job.started released_by).
    if held and releasing and not set(job_desc.admin_comment) then
      job_desc.admin_comment = without_word(admin, "bursar_hold=1") .. " bursar_released_by=" .. user_of(modify_uid)
      slurm.log_info("job_submit/bursar: job %s, held for approval, released by uid %s outside bursar",
        tostring(job_rec.job_id), tostring(modify_uid))
    end
    return slurm.SUCCESS
  end
  if held and releasing then
    -- (slurm.log_user is not available in job_modify: the user sees "Access/permission denied".)
    slurm.log_info("job_submit/bursar: uid %s may not release job %s, which waits for approval in bursar",
      tostring(modify_uid), tostring(job_rec.job_id))
    return slurm.ESLURM_ACCESS_DENIED
  end
  if job_desc.tres_per_node or job_desc.tres_per_job or job_desc.tres_per_task or job_desc.tres_per_socket
      or set(job_desc.min_nodes) or set(job_desc.max_nodes) or job_desc.shared == 0
      or (set(job_desc.time_limit) and job_rec.time_limit and job_desc.time_limit > job_rec.time_limit) then
    slurm.log_info("job_submit/bursar: uid %s may not grow job %s after admission", tostring(modify_uid),
      tostring(job_rec.job_id))
    return slurm.ESLURM_ACCESS_DENIED
  end
  local field = reserved_field(job_desc)
  if field then
    slurm.log_info("job_submit/bursar: uid %s may not write bursar's words into the %s of job %s",
      tostring(modify_uid), field, tostring(job_rec.job_id))
    return slurm.ESLURM_ACCESS_DENIED
  end
  -- A new comment keeps the hook's re-admission word.
  local readmitted = word_value(job_rec.comment, "bursar_readmit=")
  if job_desc.comment and readmitted then
    job_desc.comment = job_desc.comment .. " bursar_readmit=" .. readmitted
  end
  if set(job_desc.partition) and job_desc.partition ~= job_rec.partition then
    return readmit(job_desc, job_rec, modify_uid)
  end
  return slurm.SUCCESS
end

slurm.log_info("job_submit/bursar: loaded (%s, timeout %ss, %s)",
  CONFIG.socket and ("socket " .. CONFIG.socket .. (unix_loaded and "" or " UNUSABLE: lua-socket is missing"))
    or ("url " .. CONFIG.url),
  tostring(CONFIG.timeout), CONFIG.fail_open and "fail open" or "fail closed")
return slurm.SUCCESS
