package terraform_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	tfterraform "github.com/hashicorp/terraform-plugin-testing/terraform"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/issuer"
	"github.com/magnetar-dev/magnetar/e2e"
	"github.com/magnetar-dev/magnetar/internal/accesstoken"
	"github.com/magnetar-dev/magnetar/policy/roles"
	"github.com/magnetar-dev/magnetar/regions/up"
	"github.com/magnetar-dev/magnetar/terraform"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// terraformCLI points terraform-plugin-testing at a Terraform or OpenTofu
// CLI: $TF_ACC_TERRAFORM_PATH, else terraform on PATH, else tofu on PATH
// (with the OpenTofu registry host, which tofu gives unqualified provider
// names). It skips the test when there is none.
func terraformCLI(t *testing.T) {
	t.Helper()
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance test: set TF_ACC=1 (make test does)")
	}
	// No ~/.terraformrc: an empty CLI configuration keeps the CLI quiet.
	rc := t.TempDir() + "/terraformrc"
	if err := os.WriteFile(rc, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TF_CLI_CONFIG_FILE", rc)
	t.Setenv("TF_IN_AUTOMATION", "1")
	t.Setenv("CHECKPOINT_DISABLE", "1") // no version check over the network
	if p := os.Getenv("TF_ACC_TERRAFORM_PATH"); p != "" {
		if strings.HasSuffix(p, "tofu") && os.Getenv("TF_ACC_PROVIDER_HOST") == "" {
			t.Setenv("TF_ACC_PROVIDER_HOST", "registry.opentofu.org")
		}
		return
	}
	if p, err := exec.LookPath("terraform"); err == nil {
		t.Setenv("TF_ACC_TERRAFORM_PATH", p)
		return
	}
	if p, err := exec.LookPath("tofu"); err == nil {
		t.Setenv("TF_ACC_TERRAFORM_PATH", p)
		t.Setenv("TF_ACC_PROVIDER_HOST", "registry.opentofu.org")
		return
	}
	t.Skip("no Terraform CLI: neither terraform nor tofu is on PATH and TF_ACC_TERRAFORM_PATH is unset (.ci/run installs OpenTofu)")
}

var providers = map[string]func() (tfprotov6.ProviderServer, error){
	"magnetar": providerserver.NewProtocol6WithError(terraform.New("test")()),
}

// env is a running control plane with one region agent provisioning real
// data-plane processes (regions/up), and an operator's API client.
type env struct {
	up   *up.Env
	key  string
	conn *grpc.ClientConn
}

func startEnv(t *testing.T) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := up.Start(ctx, up.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Regions: []string{"local-a"},
		Binary: e2e.Binary(t), Logger: quiet(), PollTimeout: 2 * time.Second, DataPlaneAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), time.Minute)
		defer c()
		if err := e.Shutdown(sctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	raw, err := os.ReadFile(e.KeyFile())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(e.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &env{up: e, key: strings.TrimSpace(string(raw)), conn: conn}
}

// ctx is a context authenticated with the operator key.
func (e *env) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+e.key)
}

func (e *env) providerBlock() string {
	return fmt.Sprintf("provider \"magnetar\" {\n  endpoint     = %q\n  api_key_file = %q\n}\n", e.up.Addr(), e.up.KeyFile())
}

// estate is the configuration under test; its fields vary per step.
type estate struct {
	OrgName, SADescription, ClusterName string
	Protected                           bool
	AdminRoles                          string
	RetentionMinutes, TTL               int
	Partitions, Bookies                 int
}

func (e *env) config(s estate) string {
	return e.providerBlock() + fmt.Sprintf(`
resource "magnetar_organization" "acme" {
  organization_id = "acme"
  display_name    = %[1]q
}

resource "magnetar_service_account" "ci" {
  organization       = magnetar_organization.acme.id
  service_account_id = "ci"
  display_name       = "CI"
  description        = %[2]q
}

resource "magnetar_api_key" "ci" {
  service_account = magnetar_service_account.ci.id
  api_key_id      = "deploy"
  display_name    = "deploy key"
  expire_time     = "2099-01-01T00:00:00Z"
}

resource "magnetar_role_binding" "ci_viewer" {
  organization    = magnetar_organization.acme.id
  role_binding_id = "ci-viewer"
  role            = "roles/viewer"
  member          = magnetar_service_account.ci.id
  resource        = magnetar_organization.acme.id
}

resource "magnetar_cluster" "dev" {
  organization        = magnetar_organization.acme.id
  cluster_id          = "dev"
  region              = "regions/local-a"
  display_name        = %[3]q
  deletion_protection = %[4]t
  bookies             = %[9]d
  timeouts {
    create = "4m"
  }
}

resource "magnetar_pulsar_tenant" "shop" {
  cluster     = magnetar_cluster.dev.id
  tenant_id   = "shop"
  admin_roles = [%[5]s]
}

resource "magnetar_pulsar_namespace" "orders" {
  tenant       = magnetar_pulsar_tenant.shop.id
  namespace_id = "orders"
  policies = {
    retention = {
      time_minutes = %[6]d
      size_mb      = 100
    }
    message_ttl_seconds   = %[7]d
    deduplication_enabled = true
    backlog_quota = {
      limit_bytes = 1073741824
      policy      = "PRODUCER_EXCEPTION"
    }
  }
}

resource "magnetar_pulsar_topic" "payments" {
  namespace  = magnetar_pulsar_namespace.orders.id
  topic_id   = "payments"
  partitions = %[8]d
  timeouts {
    create = "2m"
    update = "2m"
  }
}

data "magnetar_regions" "all" {}

data "magnetar_cluster" "dev" {
  id = magnetar_cluster.dev.id
}

data "magnetar_organization" "acme" {
  id = magnetar_organization.acme.id
}

data "magnetar_service_account" "ci" {
  id = magnetar_service_account.ci.id
}

data "magnetar_api_key" "ci" {
  id = magnetar_api_key.ci.id
}

data "magnetar_role_binding" "ci_viewer" {
  id = magnetar_role_binding.ci_viewer.id
}

data "magnetar_pulsar_tenant" "shop" {
  id = magnetar_pulsar_tenant.shop.id
}

data "magnetar_pulsar_namespace" "orders" {
  id = magnetar_pulsar_namespace.orders.id
}

data "magnetar_pulsar_topic" "payments" {
  id = magnetar_pulsar_topic.payments.id
}
`, s.OrgName, s.SADescription, s.ClusterName, s.Protected, s.AdminRoles, s.RetentionMinutes, s.TTL, s.Partitions, s.Bookies)
}

// TestAccEstate drives every resource through Terraform against a real
// control plane and region agent, with one real cluster: create, produce
// and consume, update in place, import, drift, deletion protection and
// destroy.
func TestAccEstate(t *testing.T) {
	terraformCLI(t)
	e := startEnv(t)
	orgs := cpv1.NewOrganizationsClient(e.conn)
	sas := cpv1.NewServiceAccountsClient(e.conn)
	topics := cpv1.NewTopicsClient(e.conn)
	namespaces := cpv1.NewNamespacesClient(e.conn)

	// The API's own message for an invalid organization id: the plan must
	// fail with exactly it.
	_, err := orgs.CreateOrganization(e.ctx(t), &cpv1.CreateOrganizationRequest{OrganizationId: "Bad_Org", Organization: &cpv1.Organization{}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("API accepted or mis-coded an invalid id: %v", err)
	}
	apiMsg := status.Convert(err).Message()

	v1 := estate{OrgName: "Acme", SADescription: "deploys", ClusterName: "Development", Protected: true,
		AdminRoles: `"shop-admin"`, RetentionMinutes: 60, TTL: 3600, Partitions: 2, Bookies: 1}
	v2 := v1
	v2.OrgName, v2.SADescription, v2.ClusterName = "Acme Corp", "deploys the shop", "Dev"
	v2.AdminRoles, v2.RetentionMinutes, v2.TTL, v2.Partitions, v2.Bookies = `"shop-admin", "ops"`, 120, 7200, 3, 2
	v3 := v2
	v3.Protected = false

	const (
		org     = "magnetar_organization.acme"
		sa      = "magnetar_service_account.ci"
		key     = "magnetar_api_key.ci"
		binding = "magnetar_role_binding.ci_viewer"
		cluster = "magnetar_cluster.dev"
		tenant  = "magnetar_pulsar_tenant.shop"
		ns      = "magnetar_pulsar_namespace.orders"
		topic   = "magnetar_pulsar_topic.payments"
	)
	importStep := func(name string, ignore ...string) resource.TestStep {
		return resource.TestStep{Config: e.config(v2), ResourceName: name, ImportState: true, ImportStateVerify: true,
			ImportStateVerifyIgnore: ignore}
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: providers,
		CheckDestroy: func(s *tfterraform.State) error {
			_, err := orgs.GetOrganization(e.ctx(t), &cpv1.GetOrganizationRequest{Name: "organizations/acme"})
			if status.Code(err) != codes.NotFound {
				return fmt.Errorf("organizations/acme after destroy: %v", err)
			}
			return nil
		},
		Steps: []resource.TestStep{
			// An invalid name fails the plan with the API's message.
			{
				Config:      e.providerBlock() + `resource "magnetar_organization" "bad" { organization_id = "Bad_Org" }`,
				PlanOnly:    true,
				ExpectError: wrapped(apiMsg),
			},
			// Create everything; the cluster carries messages.
			{
				Config: e.config(v1),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(org, "id", "organizations/acme"),
					resource.TestCheckResourceAttr(sa, "id", "organizations/acme/serviceAccounts/ci"),
					resource.TestMatchResourceAttr(key, "secret", regexp.MustCompile(`^mgk_`)),
					resource.TestCheckResourceAttr(key, "state", "ACTIVE"),
					resource.TestCheckResourceAttr(binding, "role", "roles/viewer"),
					resource.TestCheckResourceAttr(cluster, "state", "READY"),
					resource.TestMatchResourceAttr(cluster, "service_url", regexp.MustCompile(`^pulsar\+ssl://`)),
					resource.TestMatchResourceAttr(cluster, "admin_url", regexp.MustCompile(`^https://`)),
					resource.TestMatchResourceAttr(cluster, "ca_certificate", regexp.MustCompile(`BEGIN CERTIFICATE`)),
					resource.TestCheckResourceAttr(tenant, "state", "APPLIED"),
					resource.TestCheckResourceAttr(ns, "state", "APPLIED"),
					resource.TestCheckResourceAttr(ns, "policies.retention.time_minutes", "60"),
					resource.TestCheckResourceAttr(topic, "state", "APPLIED"),
					resource.TestCheckResourceAttr(topic, "pulsar_name", "persistent://shop/orders/payments"),
					resource.TestCheckResourceAttr("data.magnetar_regions.all", "regions.0.name", "regions/local-a"),
					resource.TestCheckResourceAttrPair("data.magnetar_cluster.dev", "service_url", cluster, "service_url"),
					resource.TestCheckResourceAttrPair("data.magnetar_cluster.dev", "ca_certificate", cluster, "ca_certificate"),
					resource.TestCheckResourceAttr("data.magnetar_organization.acme", "display_name", "Acme"),
					resource.TestCheckResourceAttr("data.magnetar_service_account.ci", "description", "deploys"),
					resource.TestCheckResourceAttr("data.magnetar_pulsar_tenant.shop", "admin_roles.0", "shop-admin"),
					resource.TestCheckResourceAttrPair("data.magnetar_api_key.ci", "uid", key, "uid"),
					resource.TestCheckResourceAttr("data.magnetar_api_key.ci", "secret", ""),
					resource.TestCheckResourceAttr("data.magnetar_role_binding.ci_viewer", "member", "organizations/acme/serviceAccounts/ci"),
					resource.TestCheckResourceAttr("data.magnetar_pulsar_namespace.orders", "policies.backlog_quota.policy", "PRODUCER_EXCEPTION"),
					resource.TestCheckResourceAttr("data.magnetar_pulsar_topic.payments", "partitions", "2"),
					resource.TestCheckResourceAttr(key, "expire_time", "2099-01-01T00:00:00Z"),
					e.checkKeyWorks(key),
					e.checkRoundTrip(cluster, topic),
				),
			},
			// Update in place.
			{
				Config: e.config(v2),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(org, plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction(sa, plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction(cluster, plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction(tenant, plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction(ns, plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction(topic, plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction(key, plancheck.ResourceActionNoop),
					plancheck.ExpectResourceAction(binding, plancheck.ResourceActionNoop),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(org, "display_name", "Acme Corp"),
					resource.TestCheckResourceAttr(cluster, "display_name", "Dev"),
					resource.TestCheckResourceAttr(cluster, "bookies", "2"),
					resource.TestCheckResourceAttr(cluster, "state", "READY"),
					e.checkRoundTrip(cluster, topic),
					resource.TestCheckResourceAttr(tenant, "admin_roles.#", "2"),
					resource.TestCheckResourceAttr(topic, "partitions", "3"),
					func(*tfterraform.State) error {
						n, err := namespaces.GetNamespace(e.ctx(t), &cpv1.GetNamespaceRequest{Name: "organizations/acme/clusters/dev/tenants/shop/namespaces/orders"})
						if err != nil {
							return err
						}
						if got := n.GetPolicies().GetRetention().GetTimeMinutes(); got != 120 || n.GetPolicies().GetMessageTtlSeconds() != 7200 {
							return fmt.Errorf("namespace policies after update: %v", n.GetPolicies())
						}
						return nil
					},
				),
			},
			importStep(org),
			{Config: e.config(v2), ResourceName: sa, ImportState: true, ImportStateVerify: true, ImportStateId: "acme/ci"},
			importStep(key, "secret"),
			importStep(binding),
			importStep(cluster, "timeouts"),
			importStep(tenant),
			importStep(ns),
			importStep(topic),
			// Drift: a description changed through REST, a display name
			// through the CLI, a key revoked and a topic deleted through
			// gRPC are exactly what the plan puts back.
			{
				PreConfig: func() {
					ctx := e.ctx(t)
					e.rest(t, "PATCH", "/v1/organizations/acme/serviceAccounts/ci", `{"description": "changed out of band"}`)
					e.cli(t, "cluster", "update", "acme/dev", "--display-name", "Changed by CLI")
					if _, err := sas.RevokeApiKey(ctx, &cpv1.RevokeApiKeyRequest{Name: "organizations/acme/serviceAccounts/ci/apiKeys/deploy"}); err != nil {
						t.Fatal(err)
					}
					if _, err := topics.DeleteTopic(ctx, &cpv1.DeleteTopicRequest{Name: "organizations/acme/clusters/dev/tenants/shop/namespaces/orders/topics/payments"}); err != nil {
						t.Fatal(err)
					}
				},
				Config: e.config(v2),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(sa, plancheck.ResourceActionUpdate),
					expectOnlyChanged(sa, "description"),
					plancheck.ExpectResourceAction(topic, plancheck.ResourceActionCreate),
					plancheck.ExpectResourceAction(key, plancheck.ResourceActionDestroyBeforeCreate),
					plancheck.ExpectResourceAction(org, plancheck.ResourceActionNoop),
					plancheck.ExpectResourceAction(binding, plancheck.ResourceActionNoop),
					plancheck.ExpectResourceAction(cluster, plancheck.ResourceActionUpdate),
					expectOnlyChanged(cluster, "display_name"),
					plancheck.ExpectResourceAction(tenant, plancheck.ResourceActionNoop),
					plancheck.ExpectResourceAction(ns, plancheck.ResourceActionNoop),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(sa, "description", "deploys the shop"),
					resource.TestCheckResourceAttr(cluster, "display_name", "Dev"),
					resource.TestCheckResourceAttr(topic, "state", "APPLIED"),
					resource.TestCheckResourceAttr(key, "state", "ACTIVE"),
					e.checkKeyWorks(key),
				),
			},
			// Deletion protection: destroy fails at plan time.
			{
				Config:      e.config(v2),
				Destroy:     true,
				ExpectError: wrapped("cluster.deletion_protection: is true; set it to false before deleting the cluster"),
			},
			// Unprotected, then destroyed by the test's end.
			{
				Config: e.config(v3),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(cluster, plancheck.ResourceActionUpdate),
				}},
				Check: resource.TestCheckResourceAttr(cluster, "deletion_protection", "false"),
			},
		},
	})
}

// rest sends a REST call to the control plane with the operator key.
func (e *env) rest(t *testing.T, method, path, body string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+e.up.Addr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
}

// cli runs the magnetar CLI against the control plane with the operator key.
func (e *env) cli(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(e2e.Binary(t), args...)
	cmd.Env = append(os.Environ(), terraform.EnvEndpoint+"="+e.up.Addr(), terraform.EnvAPIKeyFile+"="+e.up.KeyFile())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("magnetar %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// wrapped matches msg in the CLI's output, which wraps long lines.
func wrapped(msg string) *regexp.Regexp {
	words := strings.Fields(msg)
	for i, w := range words {
		words[i] = regexp.QuoteMeta(w)
	}
	return regexp.MustCompile(strings.Join(words, `\s+`))
}

// checkKeyWorks authenticates with the created key's secret: the role
// binding lets the service account read its organization.
func (e *env) checkKeyWorks(key string) resource.TestCheckFunc {
	return func(s *tfterraform.State) error {
		secret := s.RootModule().Resources[key].Primary.Attributes["secret"]
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+secret)
		o, err := cpv1.NewOrganizationsClient(e.conn).GetOrganization(ctx, &cpv1.GetOrganizationRequest{Name: "organizations/acme"})
		if err != nil {
			return fmt.Errorf("GetOrganization with the new key: %w", err)
		}
		if o.GetName() != "organizations/acme" {
			return fmt.Errorf("GetOrganization with the new key: %v", o)
		}
		return nil
	}
}

// checkRoundTrip produces a message on the topic through the cluster's
// service URL and consumes it, trusting the cluster's ca_certificate, with
// the operator's access tokens (the cluster authenticates).
func (e *env) checkRoundTrip(cluster, topic string) resource.TestCheckFunc {
	return func(s *tfterraform.State) error {
		attrs := s.RootModule().Resources[cluster].Primary.Attributes
		url := attrs["service_url"]
		name := s.RootModule().Resources[topic].Primary.Attributes["pulsar_name"]
		ca, err := os.CreateTemp("", "tf-cluster-ca-*.pem")
		if err != nil {
			return err
		}
		defer os.Remove(ca.Name())
		if _, err := ca.WriteString(attrs["ca_certificate"]); err != nil {
			return err
		}
		ca.Close()
		tokens, aud := accesstoken.New("http://"+e.up.Addr(), e.key), issuer.ClusterAudience(attrs["id"])
		cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, TLSTrustCertsFilePath: ca.Name(), OperationTimeout: 30 * time.Second,
			Authentication: pulsar.NewAuthenticationTokenFromSupplier(func() (string, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				return tokens.Token(ctx, aud)
			}),
			Logger: plog.NewLoggerWithSlog(quiet())})
		if err != nil {
			return err
		}
		defer cl.Close()
		cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: name, SubscriptionName: "tf",
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			return fmt.Errorf("subscribe %s on %s: %w", name, url, err)
		}
		defer cons.Close()
		prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: name})
		if err != nil {
			return fmt.Errorf("producer %s on %s: %w", name, url, err)
		}
		defer prod.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("applied by terraform")}); err != nil {
			return fmt.Errorf("send: %w", err)
		}
		m, err := cons.Receive(ctx)
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		if string(m.Payload()) != "applied by terraform" {
			return fmt.Errorf("received %q", m.Payload())
		}
		return cons.Ack(m)
	}
}

// expectOnlyChanged checks that the planned change of addr differs from
// its prior state in exactly the given attributes, beside the ones the
// provider recomputes on every update (etag, update_time).
func expectOnlyChanged(addr string, attrs ...string) plancheck.PlanCheck {
	return onlyChanged{addr: addr, want: attrs}
}

type onlyChanged struct {
	addr string
	want []string
}

func (c onlyChanged) CheckPlan(_ context.Context, req plancheck.CheckPlanRequest, resp *plancheck.CheckPlanResponse) {
	for _, rc := range req.Plan.ResourceChanges {
		if rc.Address != c.addr {
			continue
		}
		before, _ := rc.Change.Before.(map[string]any)
		after, _ := rc.Change.After.(map[string]any)
		unknown, _ := rc.Change.AfterUnknown.(map[string]any)
		var got []string
		for k, b := range before {
			if k == "etag" || k == "update_time" {
				continue
			}
			if unknown[k] == true || !reflect.DeepEqual(b, after[k]) {
				got = append(got, k)
			}
		}
		sort.Strings(got)
		if !reflect.DeepEqual(got, c.want) {
			resp.Error = fmt.Errorf("%s: planned changes of %v, want exactly %v", c.addr, got, c.want)
		}
		return
	}
	resp.Error = fmt.Errorf("%s: not in the plan", c.addr)
}

// TestAccQuickstartPlans plans examples/quickstart as README.md tells a
// user to apply it, with the provider configured from the environment
// only ($MAGNETAR_ENDPOINT, $MAGNETAR_API_KEY_FILE).
func TestAccQuickstartPlans(t *testing.T) {
	terraformCLI(t)
	e := startEnv(t)
	raw, err := os.ReadFile("examples/quickstart/main.tf")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(terraform.EnvEndpoint, e.up.Addr())
	t.Setenv(terraform.EnvAPIKeyFile, e.up.KeyFile())
	t.Setenv("TF_ACC_PROVIDER_NAMESPACE", "magnetar-dev") // the example's source address
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: providers,
		Steps: []resource.TestStep{{
			Config:             string(raw),
			PlanOnly:           true,
			ExpectNonEmptyPlan: true,
		}},
	})
}

// TestAccPlanTimeValidation plans configurations the API would refuse:
// each fails at plan time with the API's message, before any call.
func TestAccPlanTimeValidation(t *testing.T) {
	terraformCLI(t)
	provider := "provider \"magnetar\" {\n  endpoint = \"127.0.0.1:1\"\n  api_key  = \"unused\"\n}\n"
	cases := []struct{ config, msg string }{
		{`resource "magnetar_service_account" "x" {
  organization       = "acme"
  service_account_id = "ci"
}`, `parent: "acme" is not a organizations name (organizations/{organization})`},
		{`resource "magnetar_cluster" "x" {
  organization = "organizations/acme"
  cluster_id   = "dev"
  region       = "regions/local-a"
  brokers      = 0
}`, "cluster.size.brokers: must be between 1 and 64"},
		{`resource "magnetar_role_binding" "x" {
  organization    = "organizations/acme"
  role_binding_id = "b"
  role            = "roles/root"
  member          = "organizations/acme/serviceAccounts/ci"
  resource        = "organizations/acme"
}`, "role_binding.role: must be one of " + strings.Join(roles.Names(), ", ")},
		{`resource "magnetar_role_binding" "x" {
  organization    = "organizations/acme"
  role_binding_id = "b"
  role            = "roles/viewer"
  member          = "organizations/other/serviceAccounts/ci"
  resource        = "organizations/acme"
}`, "role_binding.member: must be a principal of organizations/acme"},
		{`resource "magnetar_pulsar_tenant" "x" {
  cluster   = "organizations/acme/clusters/dev"
  tenant_id = "a/b"
}`, "tenant_id: must match ^[A-Za-z0-9_=:.-]{1,255}$"},
		{`resource "magnetar_pulsar_tenant" "x" {
  cluster     = "organizations/acme/clusters/dev"
  tenant_id   = "shop"
  admin_roles = ["ok", " padded"]
}`, "tenant.admin_roles[1]: must be 1 to 255 characters without surrounding spaces"},
		{`resource "magnetar_pulsar_namespace" "x" {
  tenant       = "organizations/acme/clusters/dev/tenants/shop"
  namespace_id = "orders"
  policies = {
    auto_topic_creation = {
      allow = true
    }
  }
}`, "namespace.policies.auto_topic_creation.type: required (NON_PARTITIONED or PARTITIONED) when allow is true"},
		{`resource "magnetar_pulsar_namespace" "x" {
  tenant       = "organizations/acme/clusters/dev/tenants/shop"
  namespace_id = "orders"
  policies = {
    retention = {
      time_minutes = -2
      size_mb      = 10
    }
  }
}`, "namespace.policies.retention.time_minutes: must be -1 (unlimited) or more"},
	}
	steps := make([]resource.TestStep, len(cases))
	for i, c := range cases {
		steps[i] = resource.TestStep{Config: provider + c.config, PlanOnly: true, ExpectError: wrapped(c.msg)}
	}
	resource.Test(t, resource.TestCase{ProtoV6ProviderFactories: providers, Steps: steps})
}
