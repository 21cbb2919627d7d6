package magnetar.authz_test

import data.magnetar.authz

acme := "organizations/acme"

prod := "organizations/acme/clusters/prod"

ns := "organizations/acme/clusters/prod/tenants/t/namespaces/ns"

topic := "organizations/acme/clusters/prod/tenants/t/namespaces/ns/topics/orders"

user(bindings) := {
	"name": "users/alice@example.com",
	"kind": "user",
	"org": acme,
	"bindings": bindings,
}

req(p, action, kind, name) := {
	"principal": p,
	"action": action,
	"resource": {"kind": kind, "name": name, "org": acme},
}

test_default_deny if {
	not authz.allow with input as {}
}

test_operator_allowed_everything if {
	op := {"name": "operators/bootstrap", "kind": "operator", "org": ""}
	authz.allow with input as {"principal": op, "action": "regions.create", "resource": {"kind": "regions", "name": "regions/us-east"}}
	authz.allow with input as {"principal": op, "action": "organizations.delete", "resource": {"kind": "organizations", "name": acme, "org": acme}}
}

test_unauthenticated_operator_denied if {
	not authz.allow with input as {"principal": {"kind": "operator"}, "action": "regions.create"}
	"unauthenticated principal" in authz.reasons with input as {"principal": {"kind": "operator"}, "action": "regions.create"}
}

test_regions_read_by_anyone if {
	p := user([])
	authz.allow with input as {"principal": p, "action": "regions.list", "resource": {"kind": "regions", "name": ""}}
	authz.allow with input as {"principal": p, "action": "regions.get", "resource": {"kind": "regions", "name": "regions/us-east"}}
}

test_regions_write_operator_only if {
	p := user([{"role": "roles/org.admin", "resource": acme}])
	req_in := {"principal": p, "action": "regions.create", "resource": {"kind": "regions", "name": "regions/eu"}}
	not authz.allow with input as req_in
	"regions.create is reserved to operators" in authz.reasons with input as req_in
}

test_own_org_get if {
	authz.allow with input as req(user([]), "organizations.get", "organizations", acme)
	not authz.allow with input as req(user([]), "organizations.update", "organizations", acme)
}

test_org_admin if {
	p := user([{"role": "roles/org.admin", "resource": acme}])
	authz.allow with input as req(p, "apiKeys.create", "apiKeys", "organizations/acme/serviceAccounts/ci/apiKeys/k1")
	authz.allow with input as req(p, "organizations.update", "organizations", acme)
	authz.allow with input as req(p, "topics.produce", "topics", topic)
	not authz.allow with input as req(p, "organizations.delete", "organizations", acme)
	not authz.allow with input as req(p, "organizations.create", "organizations", acme)
}

test_isolation if {
	p := user([{"role": "roles/org.admin", "resource": acme}])
	req_in := {
		"principal": p,
		"action": "clusters.get",
		"resource": {"kind": "clusters", "name": "organizations/globex/clusters/x", "org": "organizations/globex"},
	}
	not authz.allow with input as req_in
	"organizations/globex/clusters/x is not in the caller's organization" in authz.reasons with input as req_in
}

test_isolation_resource_org_lies if {
	# The resource claims acme but its name is in acme2.
	p := user([{"role": "roles/org.admin", "resource": acme}])
	not authz.allow with input as req(p, "clusters.get", "clusters", "organizations/acme2/clusters/x")
}

test_prefix_edge if {
	p := user([{"role": "roles/cluster.admin", "resource": prod}])
	authz.allow with input as req(p, "clusters.update", "clusters", prod)
	not authz.allow with input as req(p, "clusters.update", "clusters", "organizations/acme/clusters/prod2")
	authz.allow with input as req(p, "namespaces.create", "namespaces", ns)
}

test_cluster_admin_scope if {
	org_wide := user([{"role": "roles/cluster.admin", "resource": acme}])
	authz.allow with input as req(org_wide, "clusters.create", "clusters", "organizations/acme/clusters/new")
	not authz.allow with input as req(org_wide, "serviceAccounts.create", "serviceAccounts", "organizations/acme/serviceAccounts/x")

	one := user([{"role": "roles/cluster.admin", "resource": prod}])
	not authz.allow with input as req(one, "clusters.create", "clusters", prod)
	not authz.allow with input as req(one, "roleBindings.create", "roleBindings", "organizations/acme/roleBindings/x")
}

test_viewer if {
	p := user([{"role": "roles/viewer", "resource": prod}])
	authz.allow with input as req(p, "topics.get", "topics", topic)
	authz.allow with input as {"principal": p, "action": "tenants.list", "resource": {"kind": "tenants", "parent": prod, "org": acme}}
	not authz.allow with input as req(p, "clusters.update", "clusters", prod)
	not authz.allow with input as req(p, "topics.consume", "topics", topic)
}

test_producer_consumer if {
	prod_p := user([{"role": "roles/pulsar.producer", "resource": ns}])
	authz.allow with input as req(prod_p, "topics.produce", "topics", topic)
	not authz.allow with input as req(prod_p, "topics.consume", "topics", topic)
	authz.allow with input as req(prod_p, "namespaces.get", "namespaces", ns)
	not authz.allow with input as req(prod_p, "namespaces.update", "namespaces", ns)

	cons := user([{"role": "roles/pulsar.consumer", "resource": ns}])
	authz.allow with input as req(cons, "topics.consume", "topics", topic)
	not authz.allow with input as req(cons, "topics.produce", "topics", topic)
	not authz.allow with input as req(cons, "topics.consume", "topics", "organizations/acme/clusters/prod/tenants/t/namespaces/ns2/topics/x")

	# Their clients need the cluster's URLs: they read the cluster holding
	# the namespace, not another one, and change nothing of it.
	authz.allow with input as req(prod_p, "clusters.get", "clusters", prod)
	authz.allow with input as req(cons, "clusters.get", "clusters", prod)
	not authz.allow with input as req(cons, "clusters.get", "clusters", "organizations/acme/clusters/dev")
	not authz.allow with input as req(cons, "clusters.update", "clusters", prod)
	not authz.allow with input as req(cons, "tenants.get", "tenants", "organizations/acme/clusters/prod/tenants/t")
	org_wide := user([{"role": "roles/pulsar.producer", "resource": acme}])
	authz.allow with input as req(org_wide, "clusters.get", "clusters", "organizations/acme/clusters/dev")
	not authz.allow with input as req(org_wide, "clusters.get", "clusters", "organizations/acme2/clusters/dev")
}

test_unknown_action if {
	p := user([{"role": "roles/org.admin", "resource": acme}])
	not authz.allow with input as req(p, "widgets.get", "widgets", "organizations/acme/widgets/w")
	`unknown action "widgets.get"` in authz.reasons with input as req(p, "widgets.get", "widgets", "organizations/acme/widgets/w")
}

test_kind_mismatch if {
	p := user([{"role": "roles/pulsar.producer", "resource": ns}])
	not authz.allow with input as req(p, "topics.produce", "namespaces", ns)
}

test_no_reasons_when_allowed if {
	p := user([{"role": "roles/org.admin", "resource": acme}])
	count(authz.reasons) == 0 with input as req(p, "clusters.get", "clusters", prod)
}

test_billing_own_org_only if {
	admin := user([{"role": "roles/org.admin", "resource": acme}])
	authz.allow with input as {"principal": admin, "action": "invoices.get", "resource": {"kind": "invoices", "name": "organizations/acme/invoices/2026-12", "org": acme}}
	authz.allow with input as {"principal": admin, "action": "usageRecords.list", "resource": {"kind": "usageRecords", "parent": acme, "org": acme}}
	not authz.allow with input as {"principal": admin, "action": "invoices.get", "resource": {"kind": "invoices", "name": "organizations/other/invoices/2026-12", "org": "organizations/other"}}
	not authz.allow with input as {"principal": admin, "action": "usageRecords.list", "resource": {"kind": "usageRecords", "parent": "organizations/other", "org": "organizations/other"}}
}

test_billing_viewer if {
	bv := user([{"role": "roles/billing.viewer", "resource": acme}])
	authz.allow with input as {"principal": bv, "action": "invoices.export", "resource": {"kind": "invoices", "name": "organizations/acme/invoices/2026-12", "org": acme}}
	authz.allow with input as {"principal": bv, "action": "usageRecords.list", "resource": {"kind": "usageRecords", "parent": acme, "org": acme}}
	not authz.allow with input as {"principal": bv, "action": "clusters.list", "resource": {"kind": "clusters", "parent": acme, "org": acme}}
	v := user([{"role": "roles/viewer", "resource": acme}])
	authz.allow with input as {"principal": v, "action": "invoices.get", "resource": {"kind": "invoices", "name": "organizations/acme/invoices/2026-12", "org": acme}}
	not authz.allow with input as {"principal": v, "action": "invoices.export", "resource": {"kind": "invoices", "name": "organizations/acme/invoices/2026-12", "org": acme}}
}

test_billing_writes_operator_only if {
	admin := user([{"role": "roles/org.admin", "resource": acme}])
	not authz.allow with input as {"principal": admin, "action": "usageRecords.create", "resource": {"kind": "usageRecords", "name": ""}}
	not authz.allow with input as {"principal": admin, "action": "creditNotes.create", "resource": {"kind": "creditNotes", "parent": "organizations/acme/invoices/2026-11", "org": acme}}
	not authz.allow with input as {"principal": admin, "action": "priceBooks.create", "resource": {"kind": "priceBooks", "name": "priceBooks/cheap"}}
	authz.allow with input as {"principal": admin, "action": "priceBooks.list", "resource": {"kind": "priceBooks", "name": ""}}
}
