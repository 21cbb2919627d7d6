// Package httpjson fetches a JSON document over HTTP with a size bound:
// the OIDC discovery documents, key sets and revocation lists the brokers
// and the region agents read.
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
	_, _, err := GetIfChanged(ctx, hc, url, "", maxBytes, v)
	return err
}

// GetIfChanged is Get sending If-None-Match: etag (unless empty). An
// answer 304 Not Modified leaves v alone and reports changed false; a 200
// fills v and returns the document's ETag.
func GetIfChanged(ctx context.Context, hc *http.Client, url, etag string, maxBytes int64, v any) (newTag string, changed bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", false, err
	}
	req.Header.Set("Accept", "application/json")
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", false, err
	}
	defer resp.Body.Close()
	if etag != "" && resp.StatusCode == http.StatusNotModified {
		return etag, false, nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBytes+1))
	if err != nil {
		return "", false, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", false, fmt.Errorf("GET %s: %s: %.200s", url, resp.Status, b)
	}
	if int64(len(b)) > maxBytes {
		return "", false, fmt.Errorf("GET %s: document over %d bytes", url, maxBytes)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return "", false, fmt.Errorf("GET %s: %w", url, err)
	}
	return resp.Header.Get("ETag"), true, nil
}
