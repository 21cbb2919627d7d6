package worker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/magnetar-dev/magnetar/dataplane/functions/fnconfig"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// Function state lives in the state store (stateproxy.go), one key per
// state key: /state-store/<tenant>/<namespace>/<name>/<key>, holding the
// value's bytes; a counter is its value in decimal text. That is the
// layout of Pulsar's PulsarMetadataStateStoreProviderImpl, which Java
// instances use through the worker's state proxy, so Java, Python and Go
// functions and querystate all see the same state.
//
// Instances of our Python runtime and Go package reach it through the
// worker's state API (/magnetar/v1/functions/<t>/<ns>/<n>/state/<key> and
// .../counter/<key>); querystate and putstate are Pulsar's
// /admin/v3/functions/<t>/<ns>/<n>/state/<key>.

// maxStateValue bounds one state value.
const maxStateValue = 1 << 20

var errNoState = errCode(http.StatusServiceUnavailable, "State storage client is not done initializing: this worker has no state store")

func stateKey(t, ns, n, key string) string {
	return "/state-store/" + t + "/" + ns + "/" + n + "/" + key
}

func (w *Worker) getState(ctx context.Context, t, ns, n, key string) ([]byte, int64, error) {
	if w.state == nil {
		return nil, 0, errNoState
	}
	resp, err := w.state.kv.Get(ctx, stateKey(t, ns, n, key))
	if err != nil {
		return nil, 0, err
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, metadata.ErrNotFound
	}
	return resp.Kvs[0].Value, resp.Kvs[0].Version, nil
}

func (w *Worker) putState(ctx context.Context, t, ns, n, key string, v []byte) error {
	if w.state == nil {
		return errNoState
	}
	_, err := w.state.kv.Put(ctx, stateKey(t, ns, n, key), string(v))
	return err
}

func (w *Worker) deleteState(ctx context.Context, t, ns, n, key string) error {
	if w.state == nil {
		return errNoState
	}
	_, err := w.state.kv.Delete(ctx, stateKey(t, ns, n, key))
	return err
}

func parseCounter(key string, v []byte) (int64, error) {
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, errCode(http.StatusBadRequest, "state key %q holds a value that is not a counter", key)
	}
	return n, nil
}

// incrCounter adds delta to a counter and returns its new value (a
// compare-and-set on the key's revision, retried on a concurrent write).
func (w *Worker) incrCounter(ctx context.Context, t, ns, n, key string, delta int64) (int64, error) {
	if w.state == nil {
		return 0, errNoState
	}
	k := stateKey(t, ns, n, key)
	for {
		resp, err := w.state.kv.Get(ctx, k)
		if err != nil {
			return 0, err
		}
		var cur, rev int64
		if len(resp.Kvs) > 0 {
			if cur, err = parseCounter(key, resp.Kvs[0].Value); err != nil {
				return 0, err
			}
			rev = resp.Kvs[0].ModRevision
		}
		next := cur + delta
		txn, err := w.state.kv.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).
			Then(clientv3.OpPut(k, strconv.FormatInt(next, 10))).
			Commit()
		if err != nil {
			return 0, err
		}
		if txn.Succeeded {
			return next, nil
		}
	}
}

func (w *Worker) deleteAllState(ctx context.Context, t, ns, n string) error {
	if w.state == nil {
		return nil
	}
	_, err := w.state.kv.Delete(ctx, stateKey(t, ns, n, ""), clientv3.WithPrefix())
	return err
}

// stateAPI serves /magnetar/v1/functions/<t>/<ns>/<n>/{state,counter}/<key>.
func (w *Worker) stateAPI(rw http.ResponseWriter, r *http.Request, seg []string) error {
	ctx := r.Context()
	if len(seg) != 5 || (seg[3] != "state" && seg[3] != "counter") || seg[4] == "" {
		return errCode(http.StatusNotFound, "Not found")
	}
	t, ns, n, key := seg[0], seg[1], seg[2], seg[4]
	if _, _, err := w.getRecord(ctx, fnconfig.KindFunction, t, ns, n); err != nil {
		return err
	}
	if seg[3] == "counter" {
		switch r.Method {
		case http.MethodGet:
			v, _, err := w.getState(ctx, t, ns, n, key)
			var val int64
			switch {
			case errors.Is(err, metadata.ErrNotFound):
			case err != nil:
				return err
			default:
				if val, err = parseCounter(key, v); err != nil {
					return err
				}
			}
			writeJSON(rw, http.StatusOK, map[string]int64{"value": val})
			return nil
		case http.MethodPost:
			var body struct {
				Delta int64 `json:"delta"`
			}
			if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&body); err != nil {
				return errCode(http.StatusBadRequest, "expected {\"delta\": N}: %v", err)
			}
			v, err := w.incrCounter(ctx, t, ns, n, key, body.Delta)
			if err != nil {
				return err
			}
			writeJSON(rw, http.StatusOK, map[string]int64{"value": v})
			return nil
		}
		return errCode(http.StatusMethodNotAllowed, "method not allowed")
	}
	switch r.Method {
	case http.MethodGet:
		v, _, err := w.getState(ctx, t, ns, n, key)
		if errors.Is(err, metadata.ErrNotFound) {
			return errCode(http.StatusNotFound, "key '%s' doesn't exist.", key)
		}
		if err != nil {
			return err
		}
		rw.Header().Set("Content-Type", "application/octet-stream")
		rw.WriteHeader(http.StatusOK)
		rw.Write(v)
		return nil
	case http.MethodPut:
		v, err := io.ReadAll(io.LimitReader(r.Body, maxStateValue+1))
		if err != nil {
			return err
		}
		if len(v) > maxStateValue {
			return errCode(http.StatusRequestEntityTooLarge, "state value over %d bytes", maxStateValue)
		}
		if err := w.putState(ctx, t, ns, n, key, v); err != nil {
			return err
		}
		rw.WriteHeader(http.StatusNoContent)
		return nil
	case http.MethodDelete:
		if err := w.deleteState(ctx, t, ns, n, key); err != nil {
			return err
		}
		rw.WriteHeader(http.StatusNoContent)
		return nil
	}
	return errCode(http.StatusMethodNotAllowed, "method not allowed")
}

// FunctionState is Pulsar's querystate/putstate body.
type FunctionState struct {
	Key         string `json:"key"`
	StringValue string `json:"stringValue,omitempty"`
	ByteValue   []byte `json:"byteValue,omitempty"`
	NumberValue *int64 `json:"numberValue,omitempty"`
	Version     int64  `json:"version"`
}

// pulsarState serves querystate (GET) and putstate (POST, multipart part
// "state" holding a FunctionState).
func (w *Worker) pulsarState(rw http.ResponseWriter, r *http.Request, t, ns, n, key string) error {
	ctx := r.Context()
	if _, _, err := w.getRecord(ctx, fnconfig.KindFunction, t, ns, n); err != nil {
		return err
	}
	if r.Method == http.MethodGet {
		v, ver, err := w.getState(ctx, t, ns, n, key)
		if errors.Is(err, metadata.ErrNotFound) {
			return errCode(http.StatusNotFound, "key '%s' doesn't exist.", key)
		}
		if err != nil {
			return err
		}
		fs := FunctionState{Key: key, Version: ver}
		// Counters are decimal text: a value that reads as an integer is
		// shown as a number (as Pulsar's metadata state store does).
		if num, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			fs.NumberValue = &num
		}
		switch {
		case fs.NumberValue != nil:
		case utf8.Valid(v):
			fs.StringValue = string(v)
		default:
			fs.ByteValue = v
		}
		writeJSON(rw, http.StatusOK, fs)
		return nil
	}
	body, err := statePart(r)
	if err != nil {
		return err
	}
	var fs struct {
		Key         string  `json:"key"`
		StringValue *string `json:"stringValue"`
		ByteValue   string  `json:"byteValue"`
		NumberValue *int64  `json:"numberValue"`
	}
	if err := json.Unmarshal(body, &fs); err != nil {
		return errCode(http.StatusBadRequest, "Invalid state: %v", err)
	}
	if fs.Key != key {
		return errCode(http.StatusBadRequest, "Path key doesn't match key in json")
	}
	// Pulsar's order: bytes, then a string, then a number.
	var v []byte
	switch {
	case fs.ByteValue != "":
		if v, err = base64.StdEncoding.DecodeString(fs.ByteValue); err != nil {
			return errCode(http.StatusBadRequest, "Invalid byteValue: %v", err)
		}
	case fs.StringValue != nil:
		v = []byte(*fs.StringValue)
	case fs.NumberValue != nil:
		v = []byte(strconv.FormatInt(*fs.NumberValue, 10))
	default:
		return errCode(http.StatusBadRequest, "State value is empty")
	}
	if len(v) > maxStateValue {
		return errCode(http.StatusRequestEntityTooLarge, "state value over %d bytes", maxStateValue)
	}
	if err := w.putState(ctx, t, ns, n, key, v); err != nil {
		return err
	}
	rw.WriteHeader(http.StatusNoContent)
	return nil
}

// statePart reads the "state" part of a multipart body, or a JSON body.
func statePart(r *http.Request) ([]byte, error) {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err == nil && strings.HasPrefix(mt, "multipart/") {
		mr := multipart.NewReader(r.Body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				return nil, errCode(http.StatusBadRequest, "no state part in the body")
			}
			if err != nil {
				return nil, errCode(http.StatusBadRequest, "malformed multipart body: %v", err)
			}
			if part.FormName() == "state" {
				return io.ReadAll(io.LimitReader(part, 2*maxStateValue))
			}
		}
	}
	return io.ReadAll(io.LimitReader(r.Body, 2*maxStateValue))
}
