package broker

import (
	"errors"
	"strings"

	"github.com/magnetar-dev/magnetar/dataplane/protocol"
	"github.com/magnetar-dev/magnetar/dataplane/schemacompat"
)

// checkSchemaCompat returns protocol.ErrIncompatibleSchema when candidate may
// not be added after the existing versions under strategy (package
// schemacompat decides).
func checkSchemaCompat(strategy string, existing []SchemaEntry, candidate SchemaEntry) error {
	versions := make([]schemacompat.Version, len(existing))
	for i, e := range existing {
		versions[i] = schemacompat.Version{Type: e.Type, Data: e.Data, Deleted: e.Deleted}
	}
	err := schemacompat.Check(strategy, versions, schemacompat.Version{Type: candidate.Type, Data: candidate.Data})
	if errors.Is(err, schemacompat.ErrIncompatible) {
		return protocol.ErrIncompatibleSchema.WithMessage(strings.TrimPrefix(err.Error(), schemacompat.ErrIncompatible.Error()+": "))
	}
	return err
}
