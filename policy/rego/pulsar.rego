# Data-plane authorization: may a Pulsar role produce, consume, look up or
# administer a tenant's namespaces and topics? Brokers ask it through
# dataplane/auth with the facts of the resource in input:
#
#   role, action ("produce" | "consume" | "lookup" | "tenant_admin" |
#   "superuser"), superusers, tenant_admins, namespace_grants and
#   topic_grants (role -> actions), subscription, subscription_roles (the
#   roles allowed on that subscription; absent: no restriction) and
#   subscription_auth_mode ("None" or "Prefix").
#
# Granted role names may carry a wildcard at their start or end ("app-*",
# "*.svc", "*"), as Pulsar's authorizationAllowWildcardsMatching.
package magnetar.pulsar

default allow := false

grants_of(m) := object.get(input, m, {})

role_matches(pattern, role) if pattern == role

role_matches(pattern, role) if pattern == "*"

role_matches(pattern, role) if {
	endswith(pattern, "*")
	count(pattern) > 1
	startswith(role, trim_suffix(pattern, "*"))
}

role_matches(pattern, role) if {
	startswith(pattern, "*")
	count(pattern) > 1
	endswith(role, trim_prefix(pattern, "*"))
}

# A superuser role may end with "*": it admits every role it prefixes.
superuser if {
	some pattern in object.get(input, "superusers", [])
	superuser_matches(pattern, input.role)
}

superuser_matches(pattern, role) if pattern == role

superuser_matches(pattern, role) if {
	endswith(pattern, "*")
	startswith(role, trim_suffix(pattern, "*"))
}

tenant_admin if superuser

tenant_admin if input.role in object.get(input, "tenant_admins", [])

granted(act) if {
	some pattern, acts in grants_of("namespace_grants")
	role_matches(pattern, input.role)
	act in acts
}

granted(act) if {
	some pattern, acts in grants_of("topic_grants")
	role_matches(pattern, input.role)
	act in acts
}

may_produce if tenant_admin

may_produce if granted("produce")

may_consume_topic if tenant_admin

may_consume_topic if granted("consume")

subscription := object.get(input, "subscription", "")

subscription_roles_ok if not input.subscription_roles

subscription_roles_ok if count(input.subscription_roles) == 0

subscription_roles_ok if input.role in input.subscription_roles

subscription_roles_ok if tenant_admin

prefix_ok if object.get(input, "subscription_auth_mode", "None") != "Prefix"

prefix_ok if startswith(subscription, input.role)

prefix_ok if tenant_admin

subscription_ok if subscription == ""

subscription_ok if {
	subscription != ""
	subscription_roles_ok
	prefix_ok
}

allow if {
	input.action == "produce"
	may_produce
}

allow if {
	input.action == "consume"
	may_consume_topic
	subscription_ok
}

allow if {
	input.action == "lookup"
	may_produce
}

allow if {
	input.action == "lookup"
	may_consume_topic
}

allow if {
	input.action == "tenant_admin"
	tenant_admin
}

allow if {
	input.action == "superuser"
	superuser
}

# reasons words a denial for the client: the missing permission and the
# resource it asked about, never anything it cannot already name.
reasons contains msg if {
	input.action in {"produce", "consume", "lookup"}
	not allow
	not input.action == "consume"
	msg := sprintf("role %q lacks %s permission on %s", [input.role, input.action, input.resource])
}

reasons contains msg if {
	input.action == "consume"
	not may_consume_topic
	msg := sprintf("role %q lacks consume permission on %s", [input.role, input.resource])
}

reasons contains msg if {
	input.action == "consume"
	may_consume_topic
	not subscription_roles_ok
	msg := sprintf("role %q is not allowed on subscription %q of %s", [input.role, subscription, input.resource])
}

reasons contains msg if {
	input.action == "consume"
	may_consume_topic
	not prefix_ok
	msg := sprintf("subscription %q must start with the role name %q (subscription auth mode Prefix)", [subscription, input.role])
}

reasons contains msg if {
	input.action == "tenant_admin"
	not allow
	msg := sprintf("role %q is not an admin of tenant %s", [input.role, input.resource])
}

reasons contains msg if {
	input.action == "superuser"
	not allow
	msg := sprintf("role %q is not a superuser", [input.role])
}
