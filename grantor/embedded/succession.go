package embedded

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nuid"
)

// InstanceFile is the file in the data directory that names the process
// using it ([Server.Instance]), written once its server runs (a start
// that fails leaves the name before it there).
const InstanceFile = "leased.instance"

// succeed names this process in dir's instance file and returns the name
// there before, the predecessor's: dir is locked, so that process has
// stopped. A name that is not one [nuid] makes is no predecessor.
func succeed(dir string) (instance, predecessor string, err error) {
	path := filepath.Join(dir, InstanceFile)
	if b, err := os.ReadFile(path); err == nil {
		predecessor = strings.TrimSpace(string(b))
		if !validInstance(predecessor) {
			predecessor = ""
		}
	}
	instance = nuid.Next()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(instance+"\n"), 0o600); err != nil {
		return "", "", fmt.Errorf("embedded: instance file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", "", fmt.Errorf("embedded: instance file: %w", err)
	}
	return instance, predecessor, nil
}

// validInstance reports whether s is a name [nuid] makes.
func validInstance(s string) bool {
	if len(s) != 22 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}
