// Package dirlock keeps a data directory to one process: Acquire takes an
// exclusive flock(2) on <dir>/LOCK and writes the holder's PID into it, so a
// second process on the same directory fails at once, naming the holder,
// instead of waiting on a lock deeper down (the metadata store's files).
// The kernel releases the lock when the holder exits, however it exits: a
// crash leaves no stale lock, only a file whose PID is no longer current.
package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// FileName is the lock file's name in the directory.
const FileName = "LOCK"

// ErrInUse is wrapped by Acquire's error when another process holds the
// directory.
var ErrInUse = errors.New("data directory in use")

// Lock is a held directory lock.
type Lock struct{ f *os.File }

// Acquire creates dir if needed and locks it for this process.
func Acquire(dir string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		raw, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := "another process"
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(raw))); perr == nil && pid > 0 {
				holder = "PID " + strconv.Itoa(pid)
			}
			return nil, fmt.Errorf("%w: %s is locked by %s (%s)", ErrInUse, dir, holder, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// Release unlocks the directory. The file stays (removing it would race
// with a process that has just opened it).
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the descriptor drops the flock
	l.f = nil
	return err
}
