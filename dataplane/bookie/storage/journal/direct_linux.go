package journal

import (
	"errors"
	"fmt"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// openDirect opens the journal file name again for O_DIRECT writes, when
// fs is the operating system's file system and the file's direct I/O
// alignment (statx STATX_DIOALIGN, Linux 6.1 and later; older kernels do
// not say, and 4 KiB is then assumed, which covers 512-byte and 4 KiB
// logical blocks) is at most directBlock.
func openDirect(fs vfs.FS, name string) (*os.File, error) {
	if fs != vfs.Default {
		return nil, errors.New("journal: O_DIRECT needs the OS file system")
	}
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, name, 0, unix.STATX_DIOALIGN, &st); err == nil && st.Mask&unix.STATX_DIOALIGN != 0 {
		if st.Dio_offset_align == 0 || st.Dio_offset_align > directBlock || st.Dio_mem_align > directBlock {
			return nil, fmt.Errorf("journal: O_DIRECT alignment %d/%d not supported", st.Dio_offset_align, st.Dio_mem_align)
		}
	}
	return os.OpenFile(name, os.O_WRONLY|unix.O_DIRECT, 0)
}
