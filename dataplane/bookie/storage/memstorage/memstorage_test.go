package memstorage_test

import (
	"errors"
	"testing"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage/memstorage"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage/storagetest"
)

func TestConformance(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Storage {
		s := memstorage.New()
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestReadOnly(t *testing.T) {
	s := memstorage.New()
	defer s.Close()
	s.SetReadOnly(errors.New("disk full"))
	var got error
	s.AddEntry(1, 0, -1, []byte("x"), false, func(err error) { got = err })
	if !errors.Is(got, storage.ErrReadOnly) || s.ReadOnly() == nil {
		t.Fatalf("add to read-only storage = %v", got)
	}
	s.Fence(1, func(err error) { got = err })
	if got != nil {
		t.Fatalf("fence of read-only storage = %v", got)
	}
	s.SetReadOnly(nil)
	s.AddEntry(2, 0, -1, []byte("x"), false, func(err error) { got = err })
	if got != nil {
		t.Fatalf("add after read-only cleared = %v", got)
	}
}
