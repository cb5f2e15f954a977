package embedded_test

import (
	"errors"
	"os"
	"testing"

	"github.com/leased/leased/grantor/embedded"
)

// One server per data directory, in one process as across processes; the
// directory is free again after Shutdown.
func TestStartLocksDataDir(t *testing.T) {
	dir := t.TempDir()
	first, err := embedded.Start(embedded.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	_, err = embedded.Start(embedded.Config{DataDir: dir})
	var le *embedded.LockedError
	if !errors.Is(err, embedded.ErrLocked) || !errors.As(err, &le) || le.Dir != dir || le.PID != os.Getpid() {
		first.Shutdown()
		t.Fatalf("second server on %s: %v, want a LockedError naming pid %d", dir, err, os.Getpid())
	}
	first.Shutdown()
	first.Shutdown() // idempotent
	again, err := embedded.Start(embedded.Config{DataDir: dir})
	if err != nil {
		t.Fatalf("after Shutdown: %v", err)
	}
	again.Shutdown()
}
