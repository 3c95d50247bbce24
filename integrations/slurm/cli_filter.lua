--[[
cli_filter.lua — marks `--test-only` submissions for bursar's job_submit.lua (docs/integrations/slurm.md).

`sbatch --test-only` (and `srun`/`salloc --test-only`) asks slurmctld whether and when a job would run,
without creating it; job_submit.lua is called for it all the same, with a job description identical to
a real submission's. Without a mark the hook would reserve the job's GPUs in bursar for a job that never
exists (bursar releases it after `confirm_within_s`, but a loop of test submissions could hold a whole
project's budget meanwhile). This filter runs inside the client (sbatch, srun, salloc), where the option
is visible, and adds `bursar_test_only=1` to the job's comment; the hook then asks bursar with
`POST /v1/admit?test_only=true`, which answers without reserving anything.

The mark can be typed by hand on a real submission. The hook accepts such a job held, with no bursar id,
and refuses any release of it: a job that was never reserved never runs in bursar's name.

Install: `CliFilterPlugins=lua` in slurm.conf and this file as `cli_filter.lua` next to it (on every host
users submit from, with slurm.conf). The filter never fails a submission: any error leaves the options as
they were (the hook's `confirm_within_s` then covers the test submission).
]]

local MARK = "bursar_test_only=1"

function slurm_cli_setup_defaults(options, early_pass)
  return slurm.SUCCESS
end

-- Slurm gives flags as the strings "set" / "unset" (both true in Lua).
local function is_set(v)
  return v == "set" or v == true
end

function slurm_cli_pre_submit(options, offset)
  local ok, err = pcall(function()
    if not is_set(options["test-only"]) then return end
    local comment = options["comment"]
    if type(comment) ~= "string" then comment = "" end
    -- Every component of a heterogeneous job is marked once (the options table may be shared).
    if not comment:find(MARK, 1, true) then
      options["comment"] = (comment == "" and MARK) or (comment .. " " .. MARK)
    end
  end)
  if not ok then
    slurm.log_error("cli_filter/bursar: %s", tostring(err))
  end
  return slurm.SUCCESS
end

function slurm_cli_post_submit(offset, job_id, step_id)
  return slurm.SUCCESS
end
