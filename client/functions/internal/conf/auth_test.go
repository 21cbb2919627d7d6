package conf

import (
	"os"
	"path/filepath"
	"testing"
)

func TestTokenSource(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const tokenPlugin = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
	tests := []struct {
		name, plugin, params string
		want                 string // "" for no token
	}{
		{"none", "", "", ""},
		{"prefixed", tokenPlugin, "token:abc", "abc"},
		{"prefixed without plugin", "", "token:abc", "abc"},
		{"short plugin name", "token", "token:abc", "abc"},
		{"file URL", tokenPlugin, "file://" + file, "from-file"},
		{"JSON token", tokenPlugin, `{"token":"json-tok"}`, "json-tok"},
		{"JSON file", tokenPlugin, `{"file":"` + file + `"}`, "from-file"},
		{"bare token with plugin", tokenPlugin, "bare", "bare"},
		{"bare string without plugin is not a token", "", "bare", ""},
		{"JSON without token or plugin", "", `{"tlsCertFile":"x"}`, ""},
		{"other plugin", "org.apache.pulsar.client.impl.auth.AuthenticationTls", "token:abc", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &Conf{ClientAuthenticationPlugin: tc.plugin, ClientAuthenticationParameters: tc.params}
			src, err := c.TokenSource()
			if err != nil {
				t.Fatal(err)
			}
			if (src == nil) != (tc.want == "") {
				t.Fatalf("token source present = %v, want %v", src != nil, tc.want != "")
			}
			if src == nil {
				return
			}
			got, err := src()
			if err != nil || got != tc.want {
				t.Fatalf("token %q, %v; want %q", got, err, tc.want)
			}
		})
	}

	// A file token is read at every use.
	c := &Conf{ClientAuthenticationParameters: "file://" + file}
	src, _ := c.TokenSource()
	os.WriteFile(file, []byte("rotated"), 0o600)
	if got, _ := src(); got != "rotated" {
		t.Errorf("after rotation: %q", got)
	}
	os.Remove(file)
	if _, err := src(); err == nil {
		t.Error("missing token file: no error")
	}

	for _, params := range []string{"token:", `{"token":"x"`, `{"other":"x"}`} {
		c := &Conf{ClientAuthenticationPlugin: "token", ClientAuthenticationParameters: params}
		if _, err := c.TokenSource(); err == nil {
			t.Errorf("params %q: no error", params)
		}
	}
}

func TestPulsarAuth(t *testing.T) {
	for _, c := range []Conf{
		{},
		{ClientAuthenticationPlugin: "token", ClientAuthenticationParameters: "token:abc"},
		{ClientAuthenticationPlugin: "org.apache.pulsar.client.impl.auth.AuthenticationTls", ClientAuthenticationParameters: "tlsCertFile:/a.pem,tlsKeyFile:/a.key"},
		{ClientAuthenticationPlugin: "tls", ClientAuthenticationParameters: `{"tlsCertFile":"/a.pem","tlsKeyFile":"/a.key"}`},
	} {
		a, err := c.PulsarAuth()
		if err != nil {
			t.Errorf("%+v: %v", c, err)
		}
		if (a == nil) != (c.ClientAuthenticationPlugin == "") {
			t.Errorf("%+v: authentication %v", c, a)
		}
	}
	for _, c := range []Conf{
		{ClientAuthenticationPlugin: "com.example.Unknown", ClientAuthenticationParameters: "{}"},
		{ClientAuthenticationPlugin: "tls", ClientAuthenticationParameters: "nocolon"},
	} {
		if _, err := c.PulsarAuth(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
