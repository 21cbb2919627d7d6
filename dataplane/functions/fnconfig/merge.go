package fnconfig

import (
	"encoding/json"
	"fmt"
)

// immutable lists, per kind, the fields an update may not change, with
// the reason's wording.
var immutable = map[Kind][][2]string{
	KindFunction: {
		{"processingGuarantees", "Processing Guarantees cannot be altered"},
		{"retainOrdering", "Retain Ordering cannot be altered"},
		{"retainKeyOrdering", "Retain Key Ordering cannot be altered"},
		{"runtime", "Runtime cannot be altered"},
		{"subName", "Subscription Name cannot be altered"},
	},
	KindSource: {
		{"processingGuarantees", "Processing Guarantees cannot be altered"},
	},
	KindSink: {
		{"processingGuarantees", "Processing Guarantees cannot be altered"},
		{"retainOrdering", "Retain Ordering cannot be altered"},
		{"retainKeyOrdering", "Retain Key Ordering cannot be altered"},
		{"sourceSubscriptionName", "Subscription Name cannot be altered"},
	},
}

// Merge applies an update to an existing config of the same kind, as
// Pulsar's update does: every field the update sets replaces the existing
// one; tenant, namespace and name must match and the fields in immutable
// may not change. existing and update are JSON objects; the result is one.
func Merge(kind Kind, existing, update []byte) ([]byte, error) {
	var old, upd map[string]json.RawMessage
	if err := json.Unmarshal(existing, &old); err != nil {
		return nil, fmt.Errorf("fnconfig: stored config: %w", err)
	}
	if err := json.Unmarshal(update, &upd); err != nil {
		return nil, errorf("Invalid %s config: %v", kind, err)
	}
	for _, f := range []string{"tenant", "namespace", "name"} {
		if v, ok := upd[f]; ok && !jsonEqual(v, old[f]) {
			return nil, errorf("%s %s differs", kind.Title(), f)
		}
	}
	for _, f := range immutable[kind] {
		v, ok := upd[f[0]]
		if !ok || string(v) == "null" {
			continue
		}
		if prev, had := old[f[0]]; had && !jsonEqual(v, prev) {
			return nil, errorf("%s", f[1])
		}
	}
	for k, v := range upd {
		if string(v) == "null" {
			continue
		}
		old[k] = v
	}
	return json.Marshal(old)
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return string(a) == string(b)
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}
