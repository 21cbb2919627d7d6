package broker

// Schema registry operations for the admin REST API. They read and write
// the same /schemas/... records as the binary protocol (schema.go); each
// version stored here also carries its creation time.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// SchemaVersion is one stored schema version as the admin API shows it.
type SchemaVersion struct {
	Version int64
	SchemaEntry
}

func (r schemaRegistry) loadRecords(ctx context.Context, t TopicName) ([]SchemaEntry, metadata.Version, error) {
	kv, err := r.md.Get(ctx, schemaKey(t))
	if errors.Is(err, metadata.ErrNotFound) {
		return nil, metadata.NotExists, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var list []SchemaEntry
	if err := json.Unmarshal(kv.Value, &list); err != nil {
		return nil, 0, fmt.Errorf("corrupt schema record of %s: %w", t, err)
	}
	return list, kv.Version, nil
}

func (r schemaRegistry) updateRecords(ctx context.Context, t TopicName, fn func([]SchemaEntry) ([]SchemaEntry, error)) error {
	for {
		list, ver, err := r.loadRecords(ctx, t)
		if err != nil {
			return err
		}
		next, err := fn(list)
		if err != nil || next == nil {
			return err
		}
		b, err := json.Marshal(next)
		if err != nil {
			return err
		}
		_, err = r.md.Put(ctx, schemaKey(t), b, ver)
		if err == nil {
			return nil
		}
		if !errors.Is(err, metadata.ErrBadVersion) && !errors.Is(err, metadata.ErrExists) {
			return err
		}
	}
}

// Schemas returns a topic's schema versions that are not deleted, oldest
// first.
func (s *Service) Schemas(ctx context.Context, t TopicName) ([]SchemaVersion, error) {
	list, _, err := s.schemas.loadRecords(ctx, t)
	if err != nil {
		return nil, err
	}
	var out []SchemaVersion
	for i, e := range list {
		if !e.Deleted {
			out = append(out, SchemaVersion{Version: int64(i), SchemaEntry: e})
		}
	}
	return out, nil
}

// Schema returns one version (nil: the latest) of a topic's schema;
// ErrNotFound if there is none.
func (s *Service) Schema(ctx context.Context, t TopicName, version *int64) (SchemaVersion, error) {
	list, _, err := s.schemas.loadRecords(ctx, t)
	if err != nil {
		return SchemaVersion{}, err
	}
	if version == nil {
		for i := len(list) - 1; i >= 0; i-- {
			if !list[i].Deleted {
				return SchemaVersion{Version: int64(i), SchemaEntry: list[i]}, nil
			}
		}
		return SchemaVersion{}, fmt.Errorf("%w: Schema not found", ErrNotFound)
	}
	v := *version
	if v < 0 || v >= int64(len(list)) || list[v].Deleted {
		return SchemaVersion{}, fmt.Errorf("%w: Schema not found", ErrNotFound)
	}
	return SchemaVersion{Version: v, SchemaEntry: list[v]}, nil
}

func sameSchema(a, b SchemaEntry) bool {
	return a.Type == b.Type && bytes.Equal(a.Data, b.Data) && maps.Equal(a.Properties, b.Properties)
}

// SchemaVersionOf returns the version of a stored schema equal to e.
func (s *Service) SchemaVersionOf(ctx context.Context, t TopicName, e SchemaEntry) (int64, error) {
	list, _, err := s.schemas.loadRecords(ctx, t)
	if err != nil {
		return 0, err
	}
	for i := len(list) - 1; i >= 0; i-- {
		if !list[i].Deleted && sameSchema(list[i], e) {
			return int64(i), nil
		}
	}
	return 0, fmt.Errorf("%w: Not found schema", ErrNotFound)
}

// PutSchema registers e as the topic's newest schema unless an equal
// version exists, and returns its version.
func (s *Service) PutSchema(ctx context.Context, t TopicName, e SchemaEntry) (int64, error) {
	var version int64
	err := s.schemas.updateRecords(ctx, t, func(list []SchemaEntry) ([]SchemaEntry, error) {
		for i := len(list) - 1; i >= 0; i-- {
			if !list[i].Deleted && sameSchema(list[i], e) {
				version = int64(i)
				return nil, nil
			}
		}
		e.Deleted = false
		list = append(list, withTimestamp(e))
		version = int64(len(list) - 1)
		return list, nil
	})
	return version, err
}

// DeleteSchema marks every version of the topic's schema deleted and
// returns the latest version's number (-1: none); version numbers keep
// growing after a new schema is registered.
func (s *Service) DeleteSchema(ctx context.Context, t TopicName) (latest int64, err error) {
	err = s.schemas.updateRecords(ctx, t, func(list []SchemaEntry) ([]SchemaEntry, error) {
		latest = int64(len(list) - 1)
		changed := false
		for i := range list {
			if !list[i].Deleted {
				list[i].Deleted = true
				changed = true
			}
		}
		if !changed {
			return nil, nil
		}
		return list, nil
	})
	return latest, err
}

// withTimestamp stamps a new schema version with its creation time.
func withTimestamp(e SchemaEntry) SchemaEntry {
	e.Timestamp = time.Now().UnixMilli()
	return e
}
