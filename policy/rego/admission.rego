# Admission: given that the caller may do it, is this create or update
# acceptable? deny holds one object per violated rule:
#   {"code": <gRPC status name>, "message": "<field>: <what is wrong>"}
# Codes: INVALID_ARGUMENT (the request itself is malformed),
# FAILED_PRECONDITION (the organization's settings forbid it),
# RESOURCE_EXHAUSTED (a quota is used up).
package magnetar.admission

# Control-plane ids: lower-case letters, digits and '-', starting with a
# letter, not ending with '-', 2 to 40 characters.
id_pattern := `^[a-z][a-z0-9-]{0,38}[a-z0-9]$`

# Pulsar tenant, namespace and topic names: Pulsar accepts letters, digits,
# '_' and the characters '-', '=', ':' and '.'; we also require at least one
# character and at most 255.
pulsar_pattern := `^[A-Za-z0-9_=:.-]{1,255}$`

# id_fields names the request field that carries the new resource's id, per
# collection, with the pattern it must match.
id_fields := {
	"organizations": {"field": "organization_id", "pattern": id_pattern},
	"clusters": {"field": "cluster_id", "pattern": id_pattern},
	"serviceAccounts": {"field": "service_account_id", "pattern": id_pattern},
	"regions": {"field": "region_id", "pattern": id_pattern},
	"tenants": {"field": "tenant_id", "pattern": pulsar_pattern},
	"namespaces": {"field": "namespace_id", "pattern": pulsar_pattern},
	"topics": {"field": "topic_id", "pattern": pulsar_pattern},
	"functions": {"field": "function_id", "pattern": pulsar_pattern},
	"sources": {"field": "source_id", "pattern": pulsar_pattern},
	"sinks": {"field": "sink_id", "pattern": pulsar_pattern},
}

action := input.action

action_collection := data.magnetar.actions.collection(action)

is_create if data.magnetar.actions.verb(action) == "create"

# max_clusters_default is data.magnetar.limits.max_clusters, or 5 when the
# data document does not set it.
default max_clusters_default := 5

max_clusters_default := data.magnetar.limits.max_clusters

max_clusters := input.org.max_clusters if {
	input.org.max_clusters > 0
} else := max_clusters_default

# Naming: ids are checked when a resource is created (they never change).
deny contains {"code": "INVALID_ARGUMENT", "message": msg} if {
	is_create
	f := id_fields[action_collection]
	id := object.get(input.resource, "id", "")
	not regex.match(f.pattern, id)
	msg := sprintf("%s: must match %s", [f.field, f.pattern])
}

cluster_region := r if {
	r := input.resource.attributes.region
	is_string(r)
	r != ""
}

# A cluster must say where it goes.
deny contains {"code": "INVALID_ARGUMENT", "message": "region: is required"} if {
	action == "clusters.create"
	not cluster_region
}

# Allowed regions: an organization that lists regions may only use those.
deny contains {"code": "FAILED_PRECONDITION", "message": msg} if {
	action == "clusters.create"
	allowed := object.get(input.org, "allowed_regions", [])
	is_array(allowed)
	count(allowed) > 0
	region := cluster_region
	not region in allowed
	msg := sprintf("region: organization may not use region %s", [region])
}

# Maximum clusters per organization.
deny contains {"code": "RESOURCE_EXHAUSTED", "message": msg} if {
	action == "clusters.create"
	have := object.get(input.org, "cluster_count", 0)
	have + 1 > max_clusters
	msg := sprintf("organization has %d clusters, limit is %d", [have, max_clusters])
}

# An enforcing budget reached this month refuses new clusters.
deny contains {"code": "FAILED_PRECONDITION", "message": msg} if {
	action == "clusters.create"
	object.get(input.org, "budget_exceeded", false) == true
	msg := sprintf("budget: %s", [object.get(input.org, "budget_message", "the organization's budget is exceeded")])
}

# Function limits: the instances (sum of parallelism) and the RAM (sum of
# parallelism x resources.ram_bytes) of an organization's Pulsar functions,
# sources and sinks. Defaults: data.magnetar.limits.max_function_instances
# (32) and max_function_ram_bytes (32 GiB), overridden per organization by
# its max_function_instances and max_function_ram_bytes when > 0. A
# request that alone exceeds a limit is INVALID_ARGUMENT; one that exceeds
# it with the organization's other functions, sources and sinks is
# FAILED_PRECONDITION. Each message names the limit.
default max_function_instances_default := 32

max_function_instances_default := data.magnetar.limits.max_function_instances

default max_function_ram_default := 34359738368

max_function_ram_default := data.magnetar.limits.max_function_ram_bytes

max_function_instances := input.org.max_function_instances if {
	object.get(input.org, "max_function_instances", 0) > 0
} else := max_function_instances_default

max_function_ram := input.org.max_function_ram_bytes if {
	object.get(input.org, "max_function_ram_bytes", 0) > 0
} else := max_function_ram_default

instance_fields := {"functions": "function", "sources": "source", "sinks": "sink"}

instance_write := instance_fields[action_collection] if data.magnetar.actions.verb(action) in {"create", "update"}

want_instances := object.get(input.resource, ["attributes", "instances"], 0)

want_ram := object.get(input.resource, ["attributes", "ram_bytes"], 0)

deny contains {"code": "INVALID_ARGUMENT", "message": msg} if {
	field := instance_write
	want_instances > max_function_instances
	msg := sprintf("%s.parallelism: %d instances exceed the organization's limit of %d function instances (max_function_instances)", [field, want_instances, max_function_instances])
}

deny contains {"code": "FAILED_PRECONDITION", "message": msg} if {
	instance_write
	want_instances <= max_function_instances
	have := object.get(input.org, "function_instances", 0)
	have + want_instances > max_function_instances
	msg := sprintf("max_function_instances: the organization's functions, sources and sinks would run %d instances (%d besides this one), limit is %d", [have + want_instances, have, max_function_instances])
}

deny contains {"code": "INVALID_ARGUMENT", "message": msg} if {
	field := instance_write
	want_ram > max_function_ram
	msg := sprintf("%s.resources.ram_bytes: parallelism x ram_bytes is %d bytes, over the organization's limit of %d bytes of function RAM (max_function_ram_bytes)", [field, want_ram, max_function_ram])
}

deny contains {"code": "FAILED_PRECONDITION", "message": msg} if {
	instance_write
	want_ram <= max_function_ram
	have := object.get(input.org, "function_ram_bytes", 0)
	have + want_ram > max_function_ram
	msg := sprintf("max_function_ram_bytes: the organization's functions, sources and sinks would use %d bytes of RAM (%d besides this one), limit is %d", [have + want_ram, have, max_function_ram])
}
