package admin_test

import "testing"

// TestMigrationREST: the namespace and cluster migration endpoints, their
// answers to bad input, and what GET shows.
func TestMigrationREST(t *testing.T) {
	s := cluster(t)
	base := s.WebServiceURL()
	ns := "/admin/v2/namespaces/migt/ns"
	runCalls(t, base, []call{
		{"tenant", "PUT", "/admin/v2/tenants/migt", `{"allowedClusters":["standalone"]}`, "", 204, ""},
		{"namespace", "PUT", ns, "", "", 204, ""},
		{"remote", "PUT", "/admin/v2/clusters/mig-remote", `{"serviceUrl":"http://127.0.0.1:1","brokerServiceUrl":"pulsar://127.0.0.1:1"}`, "", 204, ""},
		{"not a state", "POST", ns + "/migration", `maybe`, "", 400, "want true, false or"},
		{"empty body", "POST", ns + "/migration", ``, "", 400, "Invalid migration state"},
		{"unknown field", "POST", ns + "/migration", `{"migrated":true,"target":"x"}`, "", 400, "unknown field"},
		{"migrated missing", "POST", ns + "/migration", `{"migratedClusterUrl":{"brokerServiceUrl":"pulsar://h:6650"}}`, "", 400, "(true or false) is required"},
		{"bad broker URL", "POST", ns + "/migration", `{"migrated":true,"migratedClusterUrl":{"brokerServiceUrl":"http://h:6650"}}`, "", 400, "want pulsar or pulsar+ssl://host:port"},
		{"no broker URL", "POST", ns + "/migration", `{"migrated":true,"migratedClusterUrl":{"serviceUrl":"http://h:8080"}}`, "", 400, "brokerServiceUrl or brokerServiceUrlTls is required"},
		{"unknown target cluster", "POST", ns + "/migration", `{"migrated":true,"migratedClusterName":"nowhere","migratedClusterUrl":{"brokerServiceUrl":"pulsar://h:6650"}}`, "", 400, "cluster nowhere does not exist"},
		{"true without any URL", "POST", ns + "/migration", `true`, "", 400, "cluster standalone has none"},
		{"unknown namespace", "POST", "/admin/v2/namespaces/migt/nope/migration", `false`, "", 404, "Namespace does not exist"},
		{"fence", "POST", ns + "/migration", `{"migrated":true,"migratedClusterName":"mig-remote","migratedClusterUrl":{"serviceUrl":"http://127.0.0.1:1","brokerServiceUrl":"pulsar://127.0.0.1:1"}}`, "", 204, ""},
		{"get state", "GET", ns + "/migration", "", "", 200, `"migratedClusterName":"mig-remote"`},
		{"policies show it", "GET", ns, "", "", 200, `"migrated":true`},
		{"unfence", "POST", ns + "/migration", `false`, "", 204, ""},
		{"state cleared", "GET", ns + "/migration", "", "", 200, `"migrated":false`},
		{"cluster: bad flag", "POST", "/admin/v2/clusters/mig-remote/migrate?migrated=yes", `{}`, "", 400, "want true or false"},
		{"cluster: no URL", "POST", "/admin/v2/clusters/mig-remote/migrate?migrated=true", ``, "", 400, "brokerServiceUrl is required"},
		{"cluster: bad URL", "POST", "/admin/v2/clusters/mig-remote/migrate?migrated=true", `{"brokerServiceUrl":"pulsar://"}`, "", 400, "want pulsar or pulsar+ssl://host:port"},
		{"cluster: unknown field", "POST", "/admin/v2/clusters/mig-remote/migrate", `{"url":"x"}`, "", 400, "unknown field"},
		{"cluster: unknown", "POST", "/admin/v2/clusters/nope/migrate?migrated=false", ``, "", 404, "Cluster does not exist"},
		{"cluster: migrate", "POST", "/admin/v2/clusters/mig-remote/migrate?migrated=true", `{"brokerServiceUrl":"pulsar://127.0.0.1:2"}`, "", 204, ""},
		{"cluster: shows it", "GET", "/admin/v2/clusters/mig-remote", "", "", 200, `"migratedClusterUrl":{"brokerServiceUrl":"pulsar://127.0.0.1:2"}`},
		{"cluster: clear", "POST", "/admin/v2/clusters/mig-remote/migrate?migrated=false", ``, "", 204, ""},
		{"cluster: cleared", "GET", "/admin/v2/clusters/mig-remote", "", "", 200, `"migrated":false`},
	})
}
