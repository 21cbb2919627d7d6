# The actions Magnetar's control plane and brokers ask about, by collection.
# An action is "<collection>.<verb>". Authorization is fail-closed: an action
# not listed here is allowed to operators only.
package magnetar.actions

standard_verbs := {"get", "list", "create", "update", "delete"}

# collections maps a collection id to its verbs and to where it lives:
# "global" collections have no owning organization, "org" collections live in
# one, "cluster" collections live in a cluster (the data plane's resources).
collections := {
	"regions": {"scope": "global", "verbs": standard_verbs},
	"organizations": {"scope": "org", "verbs": standard_verbs},
	"users": {"scope": "org", "verbs": standard_verbs},
	"serviceAccounts": {"scope": "org", "verbs": standard_verbs},
	"apiKeys": {"scope": "org", "verbs": standard_verbs},
	"roleBindings": {"scope": "org", "verbs": standard_verbs},
	"auditEvents": {"scope": "org", "verbs": {"get", "list"}},
	"operations": {"scope": "org", "verbs": {"get", "list", "delete", "cancel", "wait"}},
	"clusters": {"scope": "cluster", "verbs": standard_verbs},
	"tenants": {"scope": "cluster", "verbs": standard_verbs},
	"namespaces": {"scope": "cluster", "verbs": standard_verbs},
	"topics": {"scope": "cluster", "verbs": (standard_verbs | {"produce", "consume"})},
	"functions": {"scope": "cluster", "verbs": standard_verbs},
	"sources": {"scope": "cluster", "verbs": standard_verbs},
	"sinks": {"scope": "cluster", "verbs": standard_verbs},
	"usageRecords": {"scope": "org", "verbs": {"list", "create"}},
	"invoices": {"scope": "org", "verbs": {"get", "list", "export"}},
	"creditNotes": {"scope": "org", "verbs": {"get", "list", "create"}},
	"priceBooks": {"scope": "global", "verbs": {"get", "list", "create"}},
	"budgets": {"scope": "org", "verbs": standard_verbs},
	# Runbooks (failover, failback, evacuation) are replicationGroups.update.
	"replicationGroups": {"scope": "org", "verbs": standard_verbs},
}

# known is every action the policy knows, e.g. "clusters.create".
known contains action if {
	some collection, c in collections
	some verb in c.verbs
	action := concat(".", [collection, verb])
}

# is_known(action) holds for the actions in known, without building the set.
is_known(action) if verb(action) in collections[collection(action)].verbs

# operator_only are actions only operators may take, whatever their bindings.
operator_only := {
	"organizations.create",
	"organizations.delete",
	"organizations.list",
	"regions.create",
	"regions.update",
	"regions.delete",
	"usageRecords.create",
	"creditNotes.create",
	"priceBooks.create",
}

# public are actions every authenticated principal may take on global
# resources.
public := {"regions.get", "regions.list", "priceBooks.get", "priceBooks.list"}

# collection and verb split an action; both are undefined for a malformed one.
collection(action) := parts[0] if {
	parts := split(action, ".")
	count(parts) == 2
}

verb(action) := parts[1] if {
	parts := split(action, ".")
	count(parts) == 2
}
