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
