// Package httpjson fetches a JSON document over HTTP with a size bound:
// the OIDC discovery documents and key sets the brokers and the region
// agents read.
package httpjson

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// Get fetches url with hc and decodes its JSON body into v. A status other
// than 200 or a body over maxBytes is an error naming url.
func Get(ctx context.Context, hc *http.Client, url string, maxBytes int64, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBytes+1))
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %.200s", url, resp.Status, b)
	}
	if int64(len(b)) > maxBytes {
		return fmt.Errorf("GET %s: document over %d bytes", url, maxBytes)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}
