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
