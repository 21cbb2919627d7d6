# Authorization: may this principal take this action on this resource?
#
# Default deny. The engine reads allow, and reasons when allow is false.
# Resource names are Google-style paths
# ("organizations/acme/clusters/prod/tenants/t/namespaces/ns/topics/x");
# organizations are named by their resource name ("organizations/acme") in
# input.principal.org, input.resource.org and role binding resources. A
# binding grants its role on its resource and everything under it; "under"
# means equal to it or below it after a "/", so "organizations/acme" never
# covers "organizations/acme2/...".
package magnetar.authz

import data.magnetar.actions

default allow := false

action_collection := actions.collection(input.action)

action_verb := actions.verb(input.action)

# target is the resource the action is checked against: the resource itself,
# or for list and create calls without a name the collection's parent.
resource_name := object.get(input, ["resource", "name"], "")

resource_parent := object.get(input, ["resource", "parent"], "")

default target := ""

target := resource_name if resource_name != ""

target := resource_parent if {
	resource_name == ""
	resource_parent != ""
}

is_operator if input.principal.kind == "operator"

authenticated if {
	input.principal.name != ""
	input.principal.kind in {"user", "service_account", "operator"}
}

# under(name, scope): name is scope or a descendant of it.
under(name, scope) if {
	scope != ""
	name == scope
}

under(name, scope) if {
	scope != ""
	startswith(name, concat("", [scope, "/"]))
}

# same_org holds when the resource belongs to the principal's organization
# and its name really lies in that organization.
same_org if {
	input.principal.org != ""
	input.resource.org == input.principal.org
	under(target, input.principal.org)
}

# kind_matches guards against a request whose action and resource disagree.
default kind_matches := true

kind_matches := false if {
	input.resource.kind != ""
	input.resource.kind != action_collection
}

# Operators run the service and may do everything.
allow if {
	authenticated
	is_operator
}

# Reading regions is open to every authenticated principal.
allow if {
	authenticated
	not is_operator
	input.action in actions.public
	kind_matches
}

# Everything else: a known, non-operator action inside the principal's own
# organization, granted by one of its bindings.
allow if {
	authenticated
	not is_operator
	actions.is_known(input.action)
	not input.action in actions.operator_only
	kind_matches
	same_org
	granted
}

cluster_collections := {"clusters", "tenants", "namespaces", "topics", "functions", "sources", "sinks", "operations", "replicationGroups"}

# Every principal may read its own organization.
granted if {
	input.action == "organizations.get"
	target == input.principal.org
}

# roles/org.admin on the organization: every known action in it.
granted if {
	some b in input.principal.bindings
	b.role == "roles/org.admin"
	b.resource == input.resource.org
}

# roles/cluster.admin on the organization: cluster, Pulsar and operation
# actions anywhere in it, including creating clusters.
granted if {
	some b in input.principal.bindings
	b.role == "roles/cluster.admin"
	b.resource == input.resource.org
	action_collection in cluster_collections
}

# roles/cluster.admin on a cluster (or deeper): those actions on it and under
# it, but not creating clusters.
granted if {
	some b in input.principal.bindings
	b.role == "roles/cluster.admin"
	b.resource != input.resource.org
	action_collection in cluster_collections
	input.action != "clusters.create"
	under(target, b.resource)
}

# roles/viewer: every get and list on its resource and below.
granted if {
	some b in input.principal.bindings
	b.role == "roles/viewer"
	action_verb in {"get", "list"}
	under(target, b.resource)
}

billing_actions := {"usageRecords.list", "invoices.get", "invoices.list", "invoices.export", "creditNotes.get", "creditNotes.list"}

# roles/billing.viewer on the organization: its usage, invoices and credit
# notes (roles/viewer reads them too, but not the CSV export).
granted if {
	some b in input.principal.bindings
	b.role == "roles/billing.viewer"
	b.resource == input.resource.org
	input.action in billing_actions
}

pulsar_roles := {
	"roles/pulsar.producer": "produce",
	"roles/pulsar.consumer": "consume",
}

# roles/pulsar.producer and roles/pulsar.consumer on a namespace or above:
# their one verb on topics under it.
granted if {
	some b in input.principal.bindings
	input.action == concat(".", ["topics", pulsar_roles[b.role]])
	under(target, b.resource)
}

# ... and get/list of that namespace and its topics.
granted if {
	some b in input.principal.bindings
	pulsar_roles[b.role]
	action_collection in {"namespaces", "topics"}
	action_verb in {"get", "list"}
	under(target, b.resource)
}

# ... and get of the cluster holding the namespace (or of the clusters
# under the binding): its URLs and CA certificate are what the member's
# clients need to reach it.
granted if {
	some b in input.principal.bindings
	pulsar_roles[b.role]
	input.action == "clusters.get"
	regex.match(`^organizations/[^/]+/clusters/[^/]+$`, target)
	cluster_related(target, b.resource)
}

cluster_related(cluster, scope) if under(scope, cluster)

cluster_related(cluster, scope) if under(cluster, scope)

# reasons say why a request was denied, in words the caller may see. They
# name nothing the caller did not send.
reasons contains "unauthenticated principal" if not authenticated

reasons contains msg if {
	authenticated
	not is_operator
	not actions.is_known(input.action)
	msg := sprintf("unknown action %q", [input.action])
}

reasons contains msg if {
	authenticated
	not is_operator
	input.action in actions.operator_only
	msg := sprintf("%s is reserved to operators", [input.action])
}

reasons contains msg if {
	authenticated
	not is_operator
	not kind_matches
	msg := sprintf("action %s does not apply to a resource of kind %q", [input.action, input.resource.kind])
}

reasons contains msg if {
	authenticated
	not is_operator
	actions.is_known(input.action)
	not input.action in actions.operator_only
	not input.action in actions.public
	not same_org
	msg := sprintf("%s is not in the caller's organization", [target_label])
}

reasons contains msg if {
	authenticated
	not is_operator
	actions.is_known(input.action)
	not input.action in actions.operator_only
	kind_matches
	same_org
	not granted
	msg := sprintf("%s may not %s %s", [input.principal.name, input.action, target_label])
}

default target_label := "the resource"

target_label := target if target != ""
