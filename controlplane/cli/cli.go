package cli

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

// Environment variables read when the matching flag is not given.
const (
	EnvEndpoint   = "MAGNETAR_ENDPOINT"
	EnvAPIKey     = "MAGNETAR_API_KEY"
	EnvAPIKeyFile = "MAGNETAR_API_KEY_FILE"
)

// DefaultEndpoint is the control plane's default gRPC address.
const DefaultEndpoint = "127.0.0.1:7080"

// namesHelp is appended to every top-level command's help.
const namesHelp = `
Resources are named by the path of their ids, e.g. ORG/CLUSTER/TENANT/NS/TOPIC
("acme/dev/shop/orders/payments"); the ids may also be given as separate
arguments ("acme dev"), or the full resource name may be used instead
("organizations/acme/clusters/dev"). Regions and operations are named by
their id ("local-a", or "regions/local-a").

Every call authenticates with an API key: --api-key, --api-key-file,
$MAGNETAR_API_KEY or $MAGNETAR_API_KEY_FILE, in that order. --output json
prints the API's response as protobuf JSON.`

// Constructors returns the constructors of the CLI's top-level commands
// (org, region, user, serviceaccount, apikey, rolebinding, cluster, tenant,
// namespace, topic, function, source, sink, operation, usage, invoice,
// pricebook, budget, group, runbook, audit), for the magnetar binary to
// register.
func Constructors() []func() *cobra.Command {
	return []func() *cobra.Command{
		newOrgCommand, newRegionCommand, newUserCommand, newServiceAccountCommand, newAPIKeyCommand, newRoleBindingCommand,
		newClusterCommand, newTenantCommand, newNamespaceCommand, newTopicCommand,
		newFunctionCommand, newSourceCommand, newSinkCommand, newOperationCommand,
		newUsageCommand, newInvoiceCommand, newPriceBookCommand, newBudgetCommand,
		newReplicationGroupCommand, newRunbookCommand, newAuditCommand,
	}
}

// globals are the flags every top-level command carries.
type globals struct {
	endpoint   string
	apiKey     string
	apiKeyFile string
	output     string
	timeout    time.Duration
}

// newGroup returns a top-level command with the global flags.
func newGroup(use, short string) (*cobra.Command, *globals) {
	g := &globals{}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  short + ".\n" + namesHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageError(cmd, "missing subcommand")
		},
	}
	f := cmd.PersistentFlags()
	f.StringVar(&g.endpoint, "endpoint", "", "control-plane address host:port, or https://host:port for TLS (env "+EnvEndpoint+", default "+DefaultEndpoint+")")
	f.StringVar(&g.apiKey, "api-key", "", "API key (env "+EnvAPIKey+")")
	f.StringVar(&g.apiKeyFile, "api-key-file", "", "file holding the API key (env "+EnvAPIKeyFile+")")
	f.StringVarP(&g.output, "output", "o", "text", "output format: text or json")
	f.DurationVar(&g.timeout, "timeout", 10*time.Minute, "give up after this long, waiting for operations included (0: no limit)")
	return cmd, g
}

// session is one command's connection to the control plane.
type session struct {
	g      *globals
	cmd    *cobra.Command
	conn   *grpc.ClientConn
	out    io.Writer
	errOut io.Writer
	// key is the API key; keyErr is why there is none, for commands that
	// may run without one (runKeyOptional); calls to the control plane
	// need one.
	key    string
	keyErr error
}

// run wraps a command body: it checks the flags, connects, bounds the call
// with --timeout and SIGINT, and turns gRPC errors into "CODE: message".
func (g *globals) run(body func(ctx context.Context, s *session, args []string) error) func(*cobra.Command, []string) error {
	return g.runWith(false, body)
}

// runKeyOptional is run for commands that need the control plane only for
// what their flags do not say (the data-plane commands given
// --service-url or --admin-url): a missing API key is an error only when
// the body calls needKey on its *session (the connection's state).
func (g *globals) runKeyOptional(body func(ctx context.Context, s *session, args []string) error) func(*cobra.Command, []string) error {
	return g.runWith(true, body)
}

func (g *globals) runWith(keyOptional bool, body func(ctx context.Context, s *session, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if g.output != "text" && g.output != "json" {
			return usageError(cmd, fmt.Sprintf("--output must be text or json, not %q", g.output))
		}
		key, keyErr := g.key()
		if keyErr != nil && !keyOptional {
			return keyErr
		}
		conn, err := dial(g.resolveEndpoint())
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
		defer stop()
		if g.timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, g.timeout)
			defer cancel()
		}
		if keyErr == nil {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
		}
		s := &session{g: g, cmd: cmd, conn: conn, out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr(), key: key, keyErr: keyErr}
		return plainError(body(ctx, s, args))
	}
}

// needKey returns the error of a missing API key, nil when there is one.
func (s *session) needKey() error { return s.keyErr }

func (g *globals) resolveEndpoint() string {
	for _, e := range []string{g.endpoint, os.Getenv(EnvEndpoint)} {
		if e != "" {
			return e
		}
	}
	return DefaultEndpoint
}

// controlPlaneURL is the base URL of the control plane's REST API, served
// on the address dial connects to: https://host:port for an https://
// endpoint, http://host:port otherwise.
func (g *globals) controlPlaneURL() string {
	e := strings.TrimSuffix(g.resolveEndpoint(), "/")
	if strings.HasPrefix(e, "https://") || strings.HasPrefix(e, "http://") {
		return e
	}
	return "http://" + e
}

// key finds the API key: flag, flag file, env, env file.
func (g *globals) key() (string, error) {
	if g.apiKey != "" {
		return g.apiKey, nil
	}
	file := g.apiKeyFile
	if file == "" {
		if k := os.Getenv(EnvAPIKey); k != "" {
			return k, nil
		}
		file = os.Getenv(EnvAPIKeyFile)
	}
	if file == "" {
		return "", errors.New("no API key: set --api-key, --api-key-file, " + EnvAPIKey + " or " + EnvAPIKeyFile)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read API key: %w", err)
	}
	k := strings.TrimSpace(string(raw))
	if k == "" {
		return "", fmt.Errorf("read API key: %s is empty", file)
	}
	return k, nil
}

// dial connects lazily: plaintext h2c for host:port or http://, TLS with
// the system roots for https://.
func dial(endpoint string) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	switch {
	case strings.HasPrefix(endpoint, "https://"):
		endpoint = strings.TrimPrefix(endpoint, "https://")
		creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	case strings.HasPrefix(endpoint, "http://"):
		endpoint = strings.TrimPrefix(endpoint, "http://")
	}
	endpoint = strings.TrimSuffix(endpoint, "/")
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("endpoint %q: %w", endpoint, err)
	}
	return conn, nil
}

// plainError rewrites a gRPC status error as "CODE_NAME: message".
func plainError(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	return errors.New(codeName(st.Code()) + ": " + st.Message())
}

// codeName is the canonical upper-case name of a gRPC code
// (PERMISSION_DENIED for codes.PermissionDenied).
func codeName(c codes.Code) string {
	if c == codes.OK {
		return "OK"
	}
	s := c.String()
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

// usageError is returned for wrong arguments or flags.
func usageError(cmd *cobra.Command, msg string) error {
	return fmt.Errorf("%s: %s\nUsage: %s (see %s --help)", cmd.CommandPath(), msg, cmd.UseLine(), cmd.CommandPath())
}

// nameArgs accepts between 1 and len(k.collections) arguments that name a
// resource of kind k (see kind.resolve).
func nameArgs(k kind) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return usageError(cmd, "missing "+k.short())
		}
		if len(args) > len(k.collections) {
			return usageError(cmd, fmt.Sprintf("too many arguments: want %s", k.short()))
		}
		return nil
	}
}

// printJSON writes m as protobuf JSON.
func (s *session) printJSON(m proto.Message) error {
	raw, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(s.out, "%s\n", raw)
	return err
}

// print writes m as JSON or, in text mode, the table.
func (s *session) print(m proto.Message, t *table) error {
	if s.g.output == "json" {
		return s.printJSON(m)
	}
	return t.write(s.out)
}

// done reports a change without a resource to show (deletions).
func (s *session) done(m proto.Message, format string, a ...any) error {
	if s.g.output == "json" {
		return s.printJSON(m)
	}
	_, err := fmt.Fprintf(s.out, format+"\n", a...)
	return err
}

// listAll follows page tokens until the last page.
func listAll[T any](ctx context.Context, page func(ctx context.Context, token string) ([]T, string, error)) ([]T, error) {
	var all []T
	token := ""
	for {
		items, next, err := page(ctx, token)
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
		if next == "" {
			return all, nil
		}
		token = next
	}
}

// randomID returns prefix and 8 random hex digits, for ids the user did not choose.
func randomID(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// clients are created per call from the session's connection.
func (s *session) orgs() cpv1.OrganizationsClient    { return cpv1.NewOrganizationsClient(s.conn) }
func (s *session) regions() cpv1.RegionsClient       { return cpv1.NewRegionsClient(s.conn) }
func (s *session) sas() cpv1.ServiceAccountsClient   { return cpv1.NewServiceAccountsClient(s.conn) }
func (s *session) bindings() cpv1.RoleBindingsClient { return cpv1.NewRoleBindingsClient(s.conn) }
func (s *session) clusters() cpv1.ClustersClient     { return cpv1.NewClustersClient(s.conn) }
func (s *session) operations() cpv1.OperationsClient { return cpv1.NewOperationsClient(s.conn) }
func (s *session) tenants() cpv1.TenantsClient       { return cpv1.NewTenantsClient(s.conn) }
func (s *session) namespaces() cpv1.NamespacesClient { return cpv1.NewNamespacesClient(s.conn) }
func (s *session) topics() cpv1.TopicsClient         { return cpv1.NewTopicsClient(s.conn) }
func (s *session) users() cpv1.UsersClient           { return cpv1.NewUsersClient(s.conn) }
func (s *session) audit() cpv1.AuditEventsClient     { return cpv1.NewAuditEventsClient(s.conn) }
