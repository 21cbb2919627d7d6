package magnetar.pulsar_test

import data.magnetar.pulsar

base := {"role": "app", "superusers": ["admin"], "tenant_admins": ["ops"], "resource": "persistent://t/ns/x"}

test_superuser_does_everything if {
	pulsar.allow with input as object.union(base, {"role": "admin", "action": "produce"})
	pulsar.allow with input as object.union(base, {"role": "admin", "action": "superuser"})
	pulsar.allow with input as object.union(base, {"role": "admin", "action": "tenant_admin"})
}

test_superuser_prefix if {
	inp := object.union(base, {"superusers": ["operators:*"]})
	pulsar.allow with input as object.union(inp, {"role": "operators:bootstrap", "action": "superuser"})
	not pulsar.allow with input as object.union(inp, {"role": "organizations:acme:serviceAccounts:x", "action": "superuser"})
	not pulsar.allow with input as object.union(inp, {"role": "operators", "action": "superuser"})
}

test_tenant_admin_not_superuser if {
	pulsar.allow with input as object.union(base, {"role": "ops", "action": "tenant_admin"})
	pulsar.allow with input as object.union(base, {"role": "ops", "action": "consume", "subscription": "s"})
	not pulsar.allow with input as object.union(base, {"role": "ops", "action": "superuser"})
}

test_namespace_grant if {
	inp := object.union(base, {"namespace_grants": {"app": ["produce"]}})
	pulsar.allow with input as object.union(inp, {"action": "produce"})
	pulsar.allow with input as object.union(inp, {"action": "lookup"})
	not pulsar.allow with input as object.union(inp, {"action": "consume", "subscription": "s"})
	count(pulsar.reasons) == 1 with input as object.union(inp, {"action": "consume", "subscription": "s"})
}

test_topic_grant if {
	inp := object.union(base, {"topic_grants": {"app": ["consume"]}})
	pulsar.allow with input as object.union(inp, {"action": "consume", "subscription": "s"})
	not pulsar.allow with input as object.union(inp, {"action": "produce"})
}

test_wildcards if {
	pulsar.allow with input as object.union(base, {"action": "produce", "namespace_grants": {"ap*": ["produce"]}})
	pulsar.allow with input as object.union(base, {"action": "produce", "namespace_grants": {"*pp": ["produce"]}})
	pulsar.allow with input as object.union(base, {"action": "produce", "namespace_grants": {"*": ["produce"]}})
	not pulsar.allow with input as object.union(base, {"action": "produce", "namespace_grants": {"b*": ["produce"]}})
}

test_subscription_roles if {
	inp := object.union(base, {"action": "consume", "subscription": "s", "namespace_grants": {"app": ["consume"]}})
	pulsar.allow with input as object.union(inp, {"subscription_roles": ["app"]})
	not pulsar.allow with input as object.union(inp, {"subscription_roles": ["other"]})
}

test_prefix_mode if {
	inp := object.union(base, {"action": "consume", "subscription_auth_mode": "Prefix", "namespace_grants": {"app": ["consume"]}})
	pulsar.allow with input as object.union(inp, {"subscription": "app-sub"})
	not pulsar.allow with input as object.union(inp, {"subscription": "other-sub"})
}

test_nothing_granted if {
	not pulsar.allow with input as object.union(base, {"action": "lookup"})
	not pulsar.allow with input as object.union(base, {"action": "unknown"})
}
