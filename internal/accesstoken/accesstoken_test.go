package accesstoken

import (
	"encoding/base64"
	"net/http"
	"testing"
)

func TestKeyAndTokenHelpers(t *testing.T) {
	if uid, ok := APIKeyUID("mgk_abc123_s3cret"); !ok || uid != "abc123" {
		t.Errorf("APIKeyUID: %q %v", uid, ok)
	}
	for _, bad := range []string{"nope", "mgk_", "mgk__s", "mgk_abc"} {
		if _, ok := APIKeyUID(bad); ok {
			t.Errorf("APIKeyUID accepted %q", bad)
		}
	}
	payload := base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"operators:bootstrap","aud":"x"}`))
	if got := SubjectOf("h." + payload + ".s"); got != "operators:bootstrap" {
		t.Errorf("SubjectOf: %q", got)
	}
	if got := SubjectOf("garbage"); got != "" {
		t.Errorf("SubjectOf garbage: %q", got)
	}
}

func TestRefusedErrorText(t *testing.T) {
	for _, c := range []struct {
		err  RefusedError
		want string
	}{
		{RefusedError{Audience: "urn:magnetar:cluster:a/b", Status: 400, Code: "invalid_target", Description: "audience \"x\" is not yours"},
			`the control plane refused a token for urn:magnetar:cluster:a/b: invalid_target: audience "x" is not yours`},
		{RefusedError{Audience: "aud", Status: http.StatusBadGateway},
			"the control plane refused a token for aud: HTTP 502 Bad Gateway"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}
