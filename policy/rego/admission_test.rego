package magnetar.admission_test

import data.magnetar.admission

create_cluster(id, region, org) := {
	"action": "clusters.create",
	"resource": {
		"kind": "clusters",
		"id": id,
		"name": concat("/", ["organizations/acme/clusters", id]),
		"org": "organizations/acme",
		"attributes": {"region": region},
	},
	"org": org,
}

messages(code) := {d.message | some d in admission.deny; d.code == code}

test_valid_cluster if {
	count(admission.deny) == 0 with input as create_cluster("prod-1", "regions/us-east", {"cluster_count": 0})
}

test_ids if {
	good := ["ab", "a1", "prod-eu-1", "a23456789012345678901234567890123456789z"]
	every id in good {
		count(admission.deny) == 0 with input as create_cluster(id, "regions/us-east", {})
	}
	bad := ["a", "1ab", "Prod", "ab-", "-ab", "a_b", "", "a234567890123456789012345678901234567890z"]
	every id in bad {
		messages("INVALID_ARGUMENT") == {"cluster_id: must match ^[a-z][a-z0-9-]{0,38}[a-z0-9]$"} with input as create_cluster(id, "regions/us-east", {})
	}
}

test_ids_only_on_create if {
	count(admission.deny) == 0 with input as {"action": "clusters.update", "resource": {"kind": "clusters", "id": "Bad_ID"}}
}

test_pulsar_names if {
	every id in ["my-tenant", "Tenant_1", "a.b:c=d", "x"] {
		count(admission.deny) == 0 with input as {"action": "tenants.create", "resource": {"kind": "tenants", "id": id}}
	}
	every id in ["", "a/b", "a b", "a%b", "ü"] {
		count(admission.deny) == 1 with input as {"action": "topics.create", "resource": {"kind": "topics", "id": id}}
	}
}

test_region_required if {
	messages("INVALID_ARGUMENT") == {"region: is required"} with input as create_cluster("prod", "", {})
}

test_allowed_regions if {
	org := {"allowed_regions": ["regions/us-east", "regions/eu-west"]}
	count(admission.deny) == 0 with input as create_cluster("prod", "regions/eu-west", org)
	messages("FAILED_PRECONDITION") == {"region: organization may not use region regions/ap-south"} with input as create_cluster("prod", "regions/ap-south", org)
	count(admission.deny) == 0 with input as create_cluster("prod", "regions/ap-south", {"allowed_regions": []})
}

test_max_clusters_default if {
	count(admission.deny) == 0 with input as create_cluster("prod", "regions/us-east", {"cluster_count": 4})
	messages("RESOURCE_EXHAUSTED") == {"organization has 5 clusters, limit is 5"} with input as create_cluster("prod", "regions/us-east", {"cluster_count": 5})
}

test_max_clusters_override if {
	count(admission.deny) == 0 with input as create_cluster("prod", "regions/us-east", {"cluster_count": 5, "max_clusters": 6})
	messages("RESOURCE_EXHAUSTED") == {"organization has 2 clusters, limit is 2"} with input as create_cluster("prod", "regions/us-east", {"cluster_count": 2, "max_clusters": 2})
}

test_max_clusters_data if {
	messages("RESOURCE_EXHAUSTED") == {"organization has 1 clusters, limit is 1"} with input as create_cluster("prod", "regions/us-east", {"cluster_count": 1})
		with data.magnetar.limits.max_clusters as 1
}

test_several_denies if {
	req_in := create_cluster("Bad", "regions/ap-south", {"allowed_regions": ["regions/us-east"], "cluster_count": 9})
	count(admission.deny) == 3 with input as req_in
}

test_budget_exceeded_refuses_clusters if {
	req_in := {
		"action": "clusters.create", "resource": {"kind": "clusters", "id": "c2", "attributes": {"region": "regions/a"}},
		"org": {"cluster_count": 0, "budget_exceeded": true, "budget_message": "organizations/acme/budgets/m: spent 12.00 of 10.00 USD in 2026-12"},
	}
	{"code": "FAILED_PRECONDITION", "message": "budget: organizations/acme/budgets/m: spent 12.00 of 10.00 USD in 2026-12"} in admission.deny with input as req_in
	ok := json.patch(req_in, [{"op": "replace", "path": "/org/budget_exceeded", "value": false}])
	count(admission.deny) == 0 with input as ok
}

create_function(parallelism, ram, org) := {
	"action": "functions.create",
	"resource": {
		"kind": "functions",
		"id": "f",
		"name": "organizations/acme/clusters/dev/tenants/t/namespaces/ns/functions/f",
		"org": "organizations/acme",
		"attributes": {"instances": parallelism, "ram_bytes": parallelism * ram},
	},
	"org": org,
}

gib := 1073741824

test_function_limits_defaults if {
	count(admission.deny) == 0 with input as create_function(4, gib, {"function_instances": 28, "function_ram_bytes": 28 * gib})
	messages("FAILED_PRECONDITION") == {"max_function_instances: the organization's functions, sources and sinks would run 33 instances (28 besides this one), limit is 32"} with input as create_function(5, 0, {"function_instances": 28})
	messages("INVALID_ARGUMENT") == {"function.parallelism: 33 instances exceed the organization's limit of 32 function instances (max_function_instances)"} with input as create_function(33, 0, {})
	messages("FAILED_PRECONDITION") == {"max_function_ram_bytes: the organization's functions, sources and sinks would use 34359738369 bytes of RAM (34359738368 besides this one), limit is 34359738368"} with input as create_function(1, 1, {"function_ram_bytes": 32 * gib})
	messages("INVALID_ARGUMENT") == {"function.resources.ram_bytes: parallelism x ram_bytes is 34359738370 bytes, over the organization's limit of 34359738368 bytes of function RAM (max_function_ram_bytes)"} with input as create_function(2, (16 * gib) + 1, {})
}

test_function_limits_override if {
	org := {"max_function_instances": 2, "max_function_ram_bytes": 2 * gib, "function_instances": 1, "function_ram_bytes": gib}
	count(admission.deny) == 0 with input as create_function(1, gib, org)
	messages("FAILED_PRECONDITION") == {"max_function_instances: the organization's functions, sources and sinks would run 3 instances (1 besides this one), limit is 2", "max_function_ram_bytes: the organization's functions, sources and sinks would use 3221225472 bytes of RAM (1073741824 besides this one), limit is 2147483648"} with input as create_function(2, gib, org)
}

test_function_limits_data if {
	messages("INVALID_ARGUMENT") == {"function.parallelism: 2 instances exceed the organization's limit of 1 function instances (max_function_instances)"} with input as create_function(2, 0, {})
		with data.magnetar.limits.max_function_instances as 1
}

test_function_limits_sinks_on_update if {
	req_in := json.patch(create_function(40, 0, {}), [
		{"op": "replace", "path": "/action", "value": "sinks.update"},
		{"op": "replace", "path": "/resource/kind", "value": "sinks"},
	])
	messages("INVALID_ARGUMENT") == {"sink.parallelism: 40 instances exceed the organization's limit of 32 function instances (max_function_instances)"} with input as req_in
	count(admission.deny) == 0 with input as json.patch(req_in, [{"op": "replace", "path": "/action", "value": "sinks.delete"}])
}
