//go:build !linux

package journal

import (
	"errors"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// openDirect: O_DIRECT is used on Linux only.
func openDirect(vfs.FS, string) (*os.File, error) {
	return nil, errors.New("journal: O_DIRECT is not used on this system")
}
