package main_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leased/leased/grantor/api"
)

// natsCLI builds the nats CLI (natscli v0.5.0, pinned in tools/go.mod) and
// returns a function that runs it against url.
func natsCLI(t *testing.T, url string) func(args ...string) (string, error) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "nats")
	build := exec.Command("go", "build", "-o", bin, "github.com/nats-io/natscli/nats")
	build.Dir = filepath.Join("..", "..", "tools")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build natscli: %v\n%s", err, out)
	}
	return func(args ...string) (string, error) {
		out, err := exec.Command(bin, append([]string{"--server", url}, args...)...).CombinedOutput()
		return string(out), err
	}
}

// Any NATS client can use the service: the nats CLI grants, reads the bucket
// and lists the service's endpoints.
func TestNATSCLIAsClient(t *testing.T) {
	s := startServe(t, "")
	nats := natsCLI(t, s.url)

	out, err := nats("req", api.SubjectGrant, `{"name":"natscli.a","holder":"nats-cli","ttl":"30s"}`, "--raw")
	if err != nil {
		t.Fatalf("nats req: %v\n%s", err, out)
	}
	var grant api.Lease
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &grant); err != nil || grant.Token == 0 || grant.Secret == "" {
		t.Fatalf("grant reply %q: %v", out, err)
	}

	out, err = nats("kv", "get", "leases", "natscli.a", "--raw")
	if err != nil || !strings.Contains(out, `"holder":"nats-cli"`) {
		t.Fatalf("nats kv get: %v\n%s", err, out)
	}
	if strings.Contains(out, grant.Secret) {
		t.Fatal("the bucket holds the grant's secret in clear")
	}

	out, err = nats("micro", "info", "leased")
	if err != nil {
		t.Fatalf("nats micro info: %v\n%s", err, out)
	}
	for _, subj := range []string{api.SubjectGrant, api.SubjectRenew, api.SubjectRelease,
		api.SubjectGet, api.SubjectList, api.SubjectRevoke} {
		if !strings.Contains(out, subj) {
			t.Errorf("micro info lacks %s:\n%s", subj, out)
		}
	}

	// An error reply shows its code to a plain NATS client.
	out, _ = nats("req", api.SubjectGrant, `{"name":"natscli.a","holder":"someone-else"}`)
	if !strings.Contains(out, "Nats-Service-Error-Code: held") {
		t.Fatalf("held grant through nats req:\n%s", out)
	}
	if r := leased(t, s.url, "get", "natscli.a", "-o", "json"); r.code != 0 || !strings.Contains(r.stdout, `"holder":"nats-cli"`) {
		t.Fatalf("leased get: %d %s", r.code, r.stdout)
	}
}
