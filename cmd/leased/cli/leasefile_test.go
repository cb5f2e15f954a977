package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLeaseFile reads a --lease-file as renew and release do. A file that
// reads is for the lease named, and what renew and release take from it
// (holder, token, revision, secret) survives being printed and read again,
// as "renew -o json" output fed to the next --lease-file is. Seeds:
// testdata/fuzz/FuzzLeaseFile (acquire -o json output among them).
func FuzzLeaseFile(f *testing.F) {
	f.Add("jobs.nightly", []byte(`{"name":"jobs.nightly","holder":"worker-7","token":42,"revision":42,"ttl":"15s","server_ttl":"16s","secret":"5f0c"}`))
	f.Fuzz(func(t *testing.T, name string, b []byte) {
		l, err := readLeaseFile(bytes.NewReader(b), name)
		if err != nil {
			return
		}
		if l.Name != name {
			t.Fatalf("file for %q read as %q", l.Name, name)
		}
		out, err := json.Marshal(leaseJSON{Lease: l})
		if err != nil {
			t.Fatalf("a lease read from a file does not print: %v", err)
		}
		again, err := readLeaseFile(bytes.NewReader(out), name)
		if err != nil {
			t.Fatalf("printed lease %s does not read back: %v", out, err)
		}
		if again.Holder != l.Holder || again.Token != l.Token || again.Revision != l.Revision || again.Secret != l.Secret {
			t.Fatalf("tenure changed on the way through a file: %+v, then %+v", l, again)
		}
	})
}

// A lease file reads no more than maxLeaseFile bytes, whatever it holds.
func TestLeaseFileIsBounded(t *testing.T) {
	lease := `{"name":"a","holder":"h","token":1,"revision":1,"secret":"s"}`
	for _, tc := range []struct {
		name    string
		padding int
		ok      bool
	}{
		{"at the limit", maxLeaseFile - len(lease), true},
		{"over the limit", maxLeaseFile - len(lease) + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := io.MultiReader(strings.NewReader(strings.Repeat(" ", tc.padding)), strings.NewReader(lease))
			_, err := readLeaseFile(r, "a")
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok %v", err, tc.ok)
			}
		})
	}
	// A huge file is refused for its size, before it is read to the end.
	if _, err := readLeaseFile(io.LimitReader(zeros{}, 64<<20), "a"); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("64 MiB file: err = %v", err)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// A --lease-file without a secret (what "get -o json" prints) is named as
// such: renew said "--lease-file, or --holder, --token, --revision and
// --secret, are required" of the file it was given.
func TestLeaseFileWithoutSecret(t *testing.T) {
	t.Setenv("LEASED_SECRET", "")
	file := filepath.Join(t.TempDir(), "get.json")
	got := `{"name":"jobs.a","holder":"w1","token":7,"revision":9,"ttl":"30s"}`
	if err := os.WriteFile(file, []byte(got), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"renew", "release"} {
		var stdout, stderr bytes.Buffer
		code := Main(t.Context(), []string{verb, "jobs.a", "--lease-file", file, "--url", "nats://127.0.0.1:1"}, &stdout, &stderr)
		if code != ExitUsage || !strings.Contains(stderr.String(), "has no secret") {
			t.Errorf("%s --lease-file of get's output: exit %d, stderr %q; want %d, has no secret", verb, code, stderr.String(), ExitUsage)
		}
	}
}

// A token or revision of 0 given explicitly is named as such: no tenure
// has one, and it was taken for one left out ("--lease-file … has no
// revision" of a file that had one, "--token … required" of a token given).
func TestZeroTokenOrRevisionIsNamed(t *testing.T) {
	t.Setenv("LEASED_SECRET", "")
	file := filepath.Join(t.TempDir(), "lease.json")
	lease := `{"name":"jobs.a","holder":"w1","token":7,"revision":9,"ttl":"30s","secret":"5f0c"}`
	if err := os.WriteFile(file, []byte(lease), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"lease file, revision 0", []string{"--lease-file", file, "--revision", "0"}, "--revision 0: revisions start at 1"},
		{"flags, token 0", []string{"--holder", "w1", "--token", "0", "--revision", "9", "--secret", "5f0c"}, "--token 0: tokens start at 1"},
		{"flags, revision 0", []string{"--holder", "w1", "--token", "7", "--revision", "0", "--secret", "5f0c"}, "--revision 0: revisions start at 1"},
	} {
		for _, verb := range []string{"renew", "release"} {
			t.Run(tc.name+"/"+verb, func(t *testing.T) {
				var stdout, stderr bytes.Buffer
				args := append([]string{verb, "jobs.a", "--url", "nats://127.0.0.1:1"}, tc.args...)
				code := Main(t.Context(), args, &stdout, &stderr)
				if code != ExitUsage || !strings.Contains(stderr.String(), tc.want) {
					t.Errorf("exit %d, stderr %q; want %d, %q", code, stderr.String(), ExitUsage, tc.want)
				}
			})
		}
	}
}

// A --lease-file that is also the command's output ("renew --lease-file
// lease.json -o json > lease.json") was emptied by the shell before it was
// read: said so, where renew said only "unexpected end of JSON input".
func TestLeaseFileEmptiedByItsOwnRedirect(t *testing.T) {
	t.Setenv("LEASED_SECRET", "")
	file := filepath.Join(t.TempDir(), "lease.json")
	out, err := os.Create(file) // what "> lease.json" does first
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	for _, verb := range []string{"renew", "release"} {
		var stderr bytes.Buffer
		code := Main(t.Context(), []string{verb, "jobs.a", "--lease-file", file, "--url", "nats://127.0.0.1:1"}, out, &stderr)
		if code != ExitUsage || !strings.Contains(stderr.String(), "is also where this command's output goes") {
			t.Errorf("%s --lease-file F > F: exit %d, stderr %q; want %d, the file named as its own output", verb, code, stderr.String(), ExitUsage)
		}
		// An empty file that is not the output is only empty.
		stderr.Reset()
		code = Main(t.Context(), []string{verb, "jobs.a", "--lease-file", file, "--url", "nats://127.0.0.1:1"}, io.Discard, &stderr)
		if code != ExitUsage || !strings.Contains(stderr.String(), "--lease-file: empty") {
			t.Errorf("%s --lease-file of an empty file: exit %d, stderr %q; want %d, empty", verb, code, stderr.String(), ExitUsage)
		}
	}
}

// renew --ttl 0s is refused as run's and elect's are: it was taken for
// --ttl left out, and renewed the tenure with its own duration, exit 0,
// where acquire, run, elect and the API (an explicit "0s") refuse it.
func TestRenewZeroTTLIsRefused(t *testing.T) {
	t.Setenv("LEASED_SECRET", "")
	file := filepath.Join(t.TempDir(), "lease.json")
	lease := `{"name":"jobs.a","holder":"w1","token":7,"revision":9,"ttl":"30s","secret":"5f0c"}`
	if err := os.WriteFile(file, []byte(lease), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ttl := range []string{"0s", "-5s"} {
		var stdout, stderr bytes.Buffer
		code := Main(t.Context(), []string{"renew", "jobs.a", "--lease-file", file, "--ttl", ttl, "--url", "nats://127.0.0.1:1"}, &stdout, &stderr)
		if want := "--ttl " + ttl + ": want a positive duration"; code != ExitUsage || !strings.Contains(stderr.String(), want) {
			t.Errorf("renew --ttl %s: exit %d, stderr %q; want %d, %q", ttl, code, stderr.String(), ExitUsage, want)
		}
	}
}
