package journal

import (
	"errors"
	"os"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// openDirect opens the journal file name again for O_DIRECT writes, when
// fs is the operating system's file system.
func openDirect(fs vfs.FS, name string) (*os.File, error) {
	if fs != vfs.Default {
		return nil, errors.New("journal: O_DIRECT needs the OS file system")
	}
	return os.OpenFile(name, os.O_WRONLY|syscall.O_DIRECT, 0)
}
