package admin_test

import (
	"context"
	"os"
	"testing"
	"time"
)

var tempDirs []string

func tempDir() (string, error) {
	d, err := os.MkdirTemp("", "magnetar-admin-test-")
	if err == nil {
		tempDirs = append(tempDirs, d)
	}
	return d, err
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		shared.Shutdown(ctx)
		cancel()
	}
	for _, d := range tempDirs {
		os.RemoveAll(d)
	}
	os.Exit(code)
}
