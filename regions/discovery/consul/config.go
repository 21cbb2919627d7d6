package consul

import (
	"errors"
	"fmt"
	"net/http"
	"os"

	"github.com/hashicorp/consul/api"
	"github.com/spf13/pflag"
)

// Config says how to reach Consul. Every empty field falls back to the
// environment variable Consul's own command-line tools read, then to
// Consul's default, as api.DefaultConfig does:
//
//	Address        CONSUL_HTTP_ADDR         127.0.0.1:8500 (http)
//	Token          CONSUL_HTTP_TOKEN        none: the anonymous token
//	TokenFile      CONSUL_HTTP_TOKEN_FILE
//	CAFile         CONSUL_CACERT            the system roots
//	CAPath         CONSUL_CAPATH
//	ClientCert     CONSUL_CLIENT_CERT
//	ClientKey      CONSUL_CLIENT_KEY
//	TLSServerName  CONSUL_TLS_SERVER_NAME   the address's host
//
// CONSUL_HTTP_SSL, CONSUL_HTTP_SSL_VERIFY and CONSUL_HTTP_AUTH apply too;
// an Address starting with https:// selects TLS as well.
type Config struct {
	// Address of the Consul agent's HTTP API: host:port, http://host:port,
	// https://host:port or unix:///path.
	Address string
	// Token is the ACL token sent with every request.
	Token string
	// TokenFile is a file holding the ACL token, read once; Token wins.
	TokenFile string
	// CAFile and CAPath are the CA certificates that verify Consul's HTTPS
	// certificate.
	CAFile, CAPath string
	// ClientCert and ClientKey are a client certificate for Consul's HTTPS
	// listener when it verifies clients; both or neither.
	ClientCert, ClientKey string
	// TLSServerName is the name Consul's certificate is verified against.
	TLSServerName string
	// Datacenter is the datacenter the registrar's region is in, checked
	// against the agent's own at start ("": the agent's, unchecked). The
	// watcher ignores it: it reads every datacenter.
	Datacenter string
}

// AddFlags binds c's fields to --consul-* flags named after the consul
// command's own (-http-addr, -token, ...). A flag left unset keeps the
// environment variable's value, so the help text never shows a token.
func (c *Config) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&c.Address, "consul-http-addr", c.Address, "Consul agent HTTP API address, host:port or http(s)://host:port (default $CONSUL_HTTP_ADDR, else 127.0.0.1:8500)")
	f.StringVar(&c.Token, "consul-token", c.Token, "Consul ACL token (default $CONSUL_HTTP_TOKEN)")
	f.StringVar(&c.TokenFile, "consul-token-file", c.TokenFile, "file holding the Consul ACL token (default $CONSUL_HTTP_TOKEN_FILE)")
	f.StringVar(&c.CAFile, "consul-ca-file", c.CAFile, "CA certificate verifying Consul's HTTPS certificate (default $CONSUL_CACERT)")
	f.StringVar(&c.CAPath, "consul-ca-path", c.CAPath, "directory of CA certificates for Consul's HTTPS certificate (default $CONSUL_CAPATH)")
	f.StringVar(&c.ClientCert, "consul-client-cert", c.ClientCert, "client certificate for Consul's HTTPS API (default $CONSUL_CLIENT_CERT)")
	f.StringVar(&c.ClientKey, "consul-client-key", c.ClientKey, "client key for Consul's HTTPS API (default $CONSUL_CLIENT_KEY)")
	f.StringVar(&c.TLSServerName, "consul-tls-server-name", c.TLSServerName, "server name Consul's HTTPS certificate is verified against (default $CONSUL_TLS_SERVER_NAME)")
	f.StringVar(&c.Datacenter, "consul-datacenter", c.Datacenter, "Consul datacenter of this region (default: the local agent's)")
}

// Validate checks c after the environment has been applied.
func (c Config) Validate() error {
	ac := c.apiConfig()
	if (ac.TLSConfig.CertFile == "") != (ac.TLSConfig.KeyFile == "") {
		return errors.New("consul: a client certificate needs its key and a key its certificate (--consul-client-cert, --consul-client-key)")
	}
	if ac.Token == "" && ac.TokenFile != "" {
		if _, err := os.Stat(ac.TokenFile); err != nil {
			return fmt.Errorf("consul: token file: %w", err)
		}
	}
	return nil
}

// apiConfig is api.DefaultConfig (the environment) overlaid with c's
// non-empty fields.
func (c Config) apiConfig() *api.Config {
	ac := api.DefaultConfig()
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&ac.Address, c.Address)
	if c.Token != "" {
		ac.Token, ac.TokenFile = c.Token, ""
	} else if c.TokenFile != "" {
		ac.Token, ac.TokenFile = "", c.TokenFile
	}
	set(&ac.TLSConfig.CAFile, c.CAFile)
	set(&ac.TLSConfig.CAPath, c.CAPath)
	set(&ac.TLSConfig.CertFile, c.ClientCert)
	set(&ac.TLSConfig.KeyFile, c.ClientKey)
	set(&ac.TLSConfig.Address, c.TLSServerName)
	return ac
}

// tokenSource says where the token of c comes from, for error messages; it
// never includes the token.
func (c Config) tokenSource() string {
	switch {
	case c.Token != "":
		return "--consul-token"
	case c.TokenFile != "":
		return "--consul-token-file " + c.TokenFile
	case os.Getenv(api.HTTPTokenEnvName) != "":
		return "$" + api.HTTPTokenEnvName
	case os.Getenv(api.HTTPTokenFileEnvName) != "":
		return "$" + api.HTTPTokenFileEnvName
	default:
		return "no token set: the anonymous token"
	}
}

// client is an API client and the transport whose idle connections
// Shutdown closes.
type client struct {
	api       *api.Client
	transport *http.Transport
	tokenFrom string
}

func (c Config) newClient() (*client, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	ac := c.apiConfig()
	cl, err := api.NewClient(ac)
	if err != nil {
		return nil, fmt.Errorf("consul: client: %w", err)
	}
	return &client{api: cl, transport: ac.Transport, tokenFrom: c.tokenSource()}, nil
}

func (c *client) close() {
	if c.transport != nil {
		c.transport.CloseIdleConnections()
	}
}
