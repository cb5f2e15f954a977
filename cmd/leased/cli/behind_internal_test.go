package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// A stale --revision given with a current --lease-file is named as the
// one behind: renew and release blamed the file ("--lease-file F is
// behind its tenure … (one whose answer was lost, or whose output is
// another file)") of a file that was current, for the revision the user
// had typed (found trying release --lease-file F --revision 1).
func TestStaleRevisionOverridingALeaseFileIsNamed(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	nc := kvleasetest.Connect(t, srv.ClientURL())
	svc, err := grantor.New(kvleasetest.OpenStoreOn(t, nc), nc, grantor.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Stop)
	url := srv.ClientURL()
	main := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := Main(t.Context(), append(args, "--url", url), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}

	code, out, stderr := main("acquire", "jobs.f", "--ttl", "30s", "-o", "json")
	var grant api.Lease
	if code != 0 || json.Unmarshal([]byte(out), &grant) != nil {
		t.Fatalf("acquire: exit %d %q %s", code, out, stderr)
	}
	file := filepath.Join(t.TempDir(), "lease.json")
	code, out, stderr = main("renew", "jobs.f", "--lease-file", writeFile(t, file, out), "-o", "json")
	var renewed api.Lease
	if code != 0 || json.Unmarshal([]byte(out), &renewed) != nil {
		t.Fatalf("renew: exit %d %q %s", code, out, stderr)
	}
	writeFile(t, file, out) // current
	stale := strconv.FormatUint(grant.Revision, 10)
	for _, verb := range []string{"renew", "release"} {
		code, _, stderr := main(verb, "jobs.f", "--lease-file", file, "--revision", stale)
		want := "--revision " + stale + " is behind its tenure"
		if code != 6 || !strings.Contains(stderr, want) || strings.Contains(stderr, "--lease-file "+file+" is behind") ||
			!strings.Contains(stderr, "give --revision "+strconv.FormatUint(renewed.Revision, 10)) {
			t.Errorf("%s --lease-file (current) --revision %s (stale): exit %d, stderr %q; want %d, %q and the current revision, not the file blamed",
				verb, stale, code, stderr, 6, want)
		}
	}
	if code, _, stderr := main("release", "jobs.f", "--lease-file", file); code != 0 {
		t.Fatalf("release with the current file: exit %d %s", code, stderr)
	}
}

func writeFile(t *testing.T, name, data string) string {
	t.Helper()
	if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}
