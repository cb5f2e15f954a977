package embedded

import (
	"os"
	"path/filepath"
)

// LockFile is the name of the lock file [Start] keeps in the data directory.
const LockFile = "leased.lock"

func lockPath(dir string) string { return filepath.Join(dir, LockFile) }

// unlock releases a lock taken by lockDir: closing the file drops the
// flock. The file stays, so that a server starting meanwhile never locks a
// file that is about to be unlinked.
func unlock(f *os.File) {
	if f != nil {
		_ = f.Close()
	}
}
