package terraform_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	tfterraform "github.com/hashicorp/terraform-plugin-testing/terraform"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/issuer"
	"github.com/magnetar-dev/magnetar/internal/accesstoken"

	"github.com/magnetar-dev/magnetar/dataplane/functions/pyinstance/pyinstancetest"
)

const exclaimPy = `from pulsar import Function

class Exclaim(Function):
    def process(self, input, context):
        return input + context.get_user_config_value('suffix')
`

// checkFunctionRoundTrip produces in to the input topic through the
// cluster's service URL, with the operator's access tokens, and waits for
// want on the output topic.
func (e *env) checkFunctionRoundTrip(cluster, input, output, in, want string) resource.TestCheckFunc {
	return func(s *tfterraform.State) error {
		attrs := s.RootModule().Resources[cluster].Primary.Attributes
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
		cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: attrs["service_url"], TLSTrustCertsFilePath: ca.Name(),
			OperationTimeout: 30 * time.Second,
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
		cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: output, SubscriptionName: "tf-check",
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			return fmt.Errorf("subscribe %s: %w", output, err)
		}
		defer cons.Close()
		prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: input})
		if err != nil {
			return fmt.Errorf("producer %s: %w", input, err)
		}
		defer prod.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(in)}); err != nil {
			return fmt.Errorf("send: %w", err)
		}
		m, err := cons.Receive(ctx)
		if err != nil {
			return fmt.Errorf("no output of the function within 60 s: %w", err)
		}
		if string(m.Payload()) != want {
			return fmt.Errorf("function output %q, want %q", m.Payload(), want)
		}
		return cons.Ack(m)
	}
}

func (e *env) functionConfig(pkgURL string, parallelism int) string {
	return e.providerBlock() + fmt.Sprintf(`
resource "magnetar_organization" "acme" {
  organization_id = "acme"
}

resource "magnetar_cluster" "dev" {
  organization = magnetar_organization.acme.id
  cluster_id   = "dev"
  region       = "regions/local-a"
  timeouts {
    create = "4m"
  }
}

resource "magnetar_pulsar_tenant" "shop" {
  cluster   = magnetar_cluster.dev.id
  tenant_id = "shop"
}

resource "magnetar_pulsar_namespace" "orders" {
  tenant       = magnetar_pulsar_tenant.shop.id
  namespace_id = "orders"
}

resource "magnetar_pulsar_function" "exclaim" {
  namespace             = magnetar_pulsar_namespace.orders.id
  function_id           = "exclaim"
  runtime               = "PYTHON"
  class_name            = "exclaim.Exclaim"
  package_url           = %[1]q
  inputs                = ["persistent://shop/orders/in"]
  output                = "persistent://shop/orders/out"
  user_config           = jsonencode({ suffix = "!" })
  subscription_position = "EARLIEST"
  parallelism           = %[2]d
  ram_bytes             = 268435456
  timeouts {
    create = "3m"
    update = "3m"
  }
}
`, pkgURL, parallelism)
}

// TestAccFunction drives magnetar_pulsar_function through Terraform against
// a real control plane, region agent and cluster: a Python function whose
// package an httptest server in the test serves is created and its
// instance runs, its parallelism changes in place,
// import reads it back identically, a parallelism changed through the API
// is drift the plan puts back, and destroy deletes it.
func TestAccFunction(t *testing.T) {
	terraformCLI(t)
	pyinstancetest.Require(t)
	pkgs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/exclaim.py" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(exclaimPy))
	}))
	defer pkgs.Close()
	e := startEnv(t)
	fns := cpv1.NewFunctionsClient(e.conn)
	const (
		fn      = "magnetar_pulsar_function.exclaim"
		fnName  = "organizations/acme/clusters/dev/tenants/shop/namespaces/orders/functions/exclaim"
		cluster = "magnetar_cluster.dev"
	)
	pkg := pkgs.URL + "/exclaim.py"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: providers,
		CheckDestroy: func(*tfterraform.State) error {
			_, err := fns.GetFunction(e.ctx(t), &cpv1.GetFunctionRequest{Name: fnName})
			if status.Code(err) != codes.NotFound {
				return fmt.Errorf("%s after destroy: %v", fnName, err)
			}
			return nil
		},
		Steps: []resource.TestStep{
			{
				Config: e.functionConfig(pkg, 1),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(fn, "id", fnName),
					resource.TestCheckResourceAttr(fn, "state", "APPLIED"),
					resource.TestCheckResourceAttr(fn, "num_instances", "1"),
					resource.TestCheckResourceAttr(fn, "num_running", "1"),
					resource.TestCheckResourceAttr(fn, "instance_error", ""),
					resource.TestCheckResourceAttr(fn, "processing_guarantees", "ATLEAST_ONCE"),
					resource.TestCheckResourceAttr(fn, "cpu", "1"),
					// The instance works on the authenticated cluster: its
					// brokers hand it the token the agent keeps fresh.
					e.checkFunctionRoundTrip(cluster, "persistent://shop/orders/in", "persistent://shop/orders/out", "hello", "hello!"),
				),
			},
			{
				Config: e.functionConfig(pkg, 2),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(fn, plancheck.ResourceActionUpdate),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(fn, "parallelism", "2"),
					resource.TestCheckResourceAttr(fn, "num_instances", "2"),
					resource.TestCheckResourceAttr(fn, "num_running", "2"),
				),
			},
			{Config: e.functionConfig(pkg, 2), ResourceName: fn, ImportState: true, ImportStateVerify: true,
				ImportStateVerifyIgnore: []string{"timeouts"}},
			{Config: e.functionConfig(pkg, 2), ResourceName: fn, ImportState: true, ImportStateVerify: true,
				ImportStateId: "acme/dev/shop/orders/exclaim", ImportStateVerifyIgnore: []string{"timeouts"}},
			// Drift: parallelism changed through the API is put back.
			{
				PreConfig: func() {
					if _, err := fns.UpdateFunction(e.ctx(t), &cpv1.UpdateFunctionRequest{Function: &cpv1.PulsarFunction{Name: fnName, Parallelism: 1},
						UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"parallelism"}}}); err != nil {
						t.Fatal(err)
					}
				},
				Config: e.functionConfig(pkg, 2),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(fn, plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction(cluster, plancheck.ResourceActionNoop),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(fn, "parallelism", "2"),
					resource.TestCheckResourceAttr(fn, "num_running", "2"),
				),
			},
		},
	})
}
