package worker

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/magnetar-dev/magnetar/dataplane/functions/fnconfig"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// Function state: one key per state key, under
// <Root>/state/<tenant>/<namespace>/<name>/<escaped key>, holding the
// value's bytes; a counter is an 8-byte big-endian int64, as in BookKeeper's
// table service, so a counter read as bytes gives those 8 bytes.
//
// Instances of our Python runtime and Go package reach it through the
// worker's state API (/magnetar/v1/functions/<t>/<ns>/<n>/state/<key> and
// .../counter/<key>); querystate and putstate are Pulsar's
// /admin/v3/functions/<t>/<ns>/<n>/state/<key>.

// maxStateValue bounds one state value (the metadata store keeps values
// small).
const maxStateValue = 1 << 20

func (w *Worker) stateKey(t, ns, n, key string) string {
	return w.cfg.Root + "/state/" + t + "/" + ns + "/" + n + "/" + url.PathEscape(key)
}

func (w *Worker) getState(ctx context.Context, t, ns, n, key string) ([]byte, metadata.Version, error) {
	kv, err := w.md.Get(ctx, w.stateKey(t, ns, n, key))
	if err != nil {
		return nil, 0, err
	}
	return kv.Value, kv.Version, nil
}

func (w *Worker) putState(ctx context.Context, t, ns, n, key string, v []byte) error {
	_, err := w.md.Put(ctx, w.stateKey(t, ns, n, key), v, metadata.AnyVersion)
	return err
}

// incrCounter adds delta to a counter and returns its new value.
func (w *Worker) incrCounter(ctx context.Context, t, ns, n, key string, delta int64) (int64, error) {
	k := w.stateKey(t, ns, n, key)
	for {
		var cur int64
		expected := metadata.NotExists
		if kv, err := w.md.Get(ctx, k); err == nil {
			if len(kv.Value) != 8 {
				return 0, errCode(http.StatusBadRequest, "state key %q holds %d bytes, not a counter", key, len(kv.Value))
			}
			cur, expected = int64(binary.BigEndian.Uint64(kv.Value)), kv.Version
		} else if !errors.Is(err, metadata.ErrNotFound) {
			return 0, err
		}
		next := cur + delta
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(next))
		_, err := w.md.Put(ctx, k, b[:], expected)
		if errors.Is(err, metadata.ErrBadVersion) || errors.Is(err, metadata.ErrExists) {
			continue
		}
		return next, err
	}
}

func (w *Worker) deleteAllState(ctx context.Context, t, ns, n string) error {
	base := w.cfg.Root + "/state/" + t + "/" + ns + "/" + n
	keys, err := w.md.Children(ctx, base)
	if err != nil {
		return err
	}
	var errs []error
	for _, k := range keys {
		if err := w.md.Delete(ctx, base+"/"+k, metadata.AnyVersion); err != nil && !errors.Is(err, metadata.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
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
			case len(v) != 8:
				return errCode(http.StatusBadRequest, "state key %q holds %d bytes, not a counter", key, len(v))
			default:
				val = int64(binary.BigEndian.Uint64(v))
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
			return errCode(http.StatusNotFound, "key '%s' doesn't exist", key)
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
		err := w.md.Delete(ctx, w.stateKey(t, ns, n, key), metadata.AnyVersion)
		if err != nil && !errors.Is(err, metadata.ErrNotFound) {
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
			return errCode(http.StatusNotFound, "key '%s' doesn't exist", key)
		}
		if err != nil {
			return err
		}
		fs := FunctionState{Key: key, Version: int64(ver)}
		switch {
		case len(v) == 8 && !printable(v):
			num := int64(binary.BigEndian.Uint64(v))
			fs.NumberValue = &num
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
	if fs.Key != "" && fs.Key != key {
		return errCode(http.StatusBadRequest, "State key %s does not match the path's %s", fs.Key, key)
	}
	var v []byte
	switch {
	case fs.NumberValue != nil:
		v = binary.BigEndian.AppendUint64(nil, uint64(*fs.NumberValue))
	case fs.StringValue != nil:
		v = []byte(*fs.StringValue)
	case fs.ByteValue != "":
		if v, err = base64.StdEncoding.DecodeString(fs.ByteValue); err != nil {
			return errCode(http.StatusBadRequest, "Invalid byteValue: %v", err)
		}
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

// printable reports whether b reads as text (then an 8-byte value is a
// string, not a counter).
func printable(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
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
