package bursar

import rego.v1

default deny := false

deny if input.ready_image == false

deny if input.ready_data == false

deny if input.ready_script == false

deny if input.used_m + input.gpus * input.hours_m > input.quota_m

deny if input.params_x10 * 24 > (input.mem_gb * input.gpus) * 100

deny if input.queue_held + input.gpus > input.queue_cap

default big := false

big if input.gpus > 32

big if input.hours_m > 48000

default decision := "allow"

decision := "deny" if deny

decision := "require_approval" if {
	not deny
	big
}
