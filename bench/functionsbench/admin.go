package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"time"
)

// admin drives a worker's REST v3 functions API with plain multipart HTTP:
// the same requests for Magnetar and Pulsar (those of Pulsar's Java admin
// client: a functionConfig part of type application/json and the package
// as the data part, under its file name).
type admin struct {
	web    string // http://host:port
	client *http.Client
}

func newAdmin(web string) *admin {
	return &admin{web: web, client: &http.Client{Timeout: 60 * time.Second}}
}

// fnPackage is a function's package: its file name and bytes.
type fnPackage struct {
	fileName string
	data     []byte
}

// create posts a function to /admin/v3/functions/public/default/<name>.
func (a *admin) create(ctx context.Context, name string, cfg map[string]any, pkg fnPackage) error {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	c, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="functionConfig"`)
	h.Set("Content-Type", "application/json")
	pw, err := mw.CreatePart(h)
	if err != nil {
		return err
	}
	pw.Write(c)
	h = textproto.MIMEHeader{}
	h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="data"; filename=%q`, pkg.fileName))
	h.Set("Content-Type", "application/octet-stream")
	if pw, err = mw.CreatePart(h); err != nil {
		return err
	}
	pw.Write(pkg.data)
	if err := mw.Close(); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.web+"/admin/v3/functions/public/default/"+name, &buf)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	return a.do(req, nil)
}

// fnStatus is the part of FunctionStatus the benchmark reads.
type fnStatus struct {
	NumInstances int `json:"numInstances"`
	NumRunning   int `json:"numRunning"`
	Instances    []struct {
		Status struct {
			Running bool   `json:"running"`
			Error   string `json:"error"`
		} `json:"status"`
	} `json:"instances"`
}

// lastError is the first non-empty instance error in st.
func (st fnStatus) lastError() string {
	for _, in := range st.Instances {
		if in.Status.Error != "" {
			return in.Status.Error
		}
	}
	return ""
}

func (a *admin) status(ctx context.Context, name string) (fnStatus, error) {
	var st fnStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.web+"/admin/v3/functions/public/default/"+name+"/status", nil)
	if err != nil {
		return st, err
	}
	err = a.do(req, &st)
	return st, err
}

func (a *admin) delete(ctx context.Context, name string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, a.web+"/admin/v3/functions/public/default/"+name, nil)
	if err != nil {
		return err
	}
	return a.do(req, nil)
}

// do sends req and decodes a 2xx JSON answer into out (when not nil).
func (a *admin) do(req *http.Request, out any) error {
	resp, err := a.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s %s", req.Method, req.URL.Path, resp.Status, bytes.TrimSpace(b))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
		}
	}
	return nil
}

// waitRunning polls the status every interval until numRunning reaches
// want, and returns when it did. The last status error is in the error of
// a wait that ends without it.
func (a *admin) waitRunning(ctx context.Context, name string, want int, interval time.Duration) (time.Time, error) {
	var last fnStatus
	var lastErr error
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		st, err := a.status(ctx, name)
		if err == nil && st.NumRunning >= want {
			return time.Now(), nil
		}
		last, lastErr = st, err
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("function %s: %d of %d running when the wait ended (%v; status error %q; request error %v)",
				name, last.NumRunning, want, context.Cause(ctx), last.lastError(), lastErr)
		case <-tick.C:
		}
	}
}
