//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package embedded

import (
	"fmt"
	"os"
)

// lockDir creates dir if needed. This system has no flock(2): the data
// directory is not locked, and nothing stops a second server on it.
func lockDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded: data directory: %w", err)
	}
	return nil, nil
}

// LockHolder would return the process that holds dir's lock; this system
// has no locks.
func LockHolder(dir string) (int, error) {
	return 0, fmt.Errorf("%w: data directories are not locked on this system", ErrNotLocked)
}
