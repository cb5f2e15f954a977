package main_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/api"
)

// The CLI details of issue 10 item 14, each against a real `leased serve`.
func TestCLIDetails(t *testing.T) {
	s := startServe(t, "")
	url := s.url
	dir := t.TempDir()
	run := func(t *testing.T, code int, args ...string) result {
		t.Helper()
		r := leased(t, url, args...)
		if r.code != code {
			t.Fatalf("leased %v: exit %d, want %d\nstdout %s\nstderr %s", args, r.code, code, r.stdout, r.stderr)
		}
		return r
	}

	t.Run("json output has no zero server_time", func(t *testing.T) {
		acq := run(t, 0, "acquire", "details.time", "-o", "json")
		file := filepath.Join(dir, "time.json")
		if err := os.WriteFile(file, []byte(acq.stdout), 0o600); err != nil {
			t.Fatal(err)
		}
		ren := run(t, 0, "renew", "details.time", "--lease-file", file, "-o", "json")
		for _, out := range []string{acq.stdout, ren.stdout} {
			if strings.Contains(out, `"0001-01-01T00:00:00Z"`) {
				t.Fatalf("zero time printed: %s", out)
			}
		}
	})

	t.Run("renew --lease-file honours --revision", func(t *testing.T) {
		acq := run(t, 0, "acquire", "details.rev", "-o", "json", "--ttl", "30s")
		file := filepath.Join(dir, "rev.json")
		if err := os.WriteFile(file, []byte(acq.stdout), 0o600); err != nil {
			t.Fatal(err)
		}
		// A renewal whose answer a script lost: the file still names the
		// grant's revision, the conflict reply the current one.
		var renewed api.Lease
		if err := json.Unmarshal([]byte(run(t, 0, "renew", "details.rev", "--lease-file", file, "-o", "json").stdout), &renewed); err != nil {
			t.Fatal(err)
		}
		run(t, 6, "renew", "details.rev", "--lease-file", file)
		run(t, 0, "renew", "details.rev", "--lease-file", file, "--revision", strconv.FormatUint(renewed.Revision, 10))
		// What the file names cannot be contradicted.
		run(t, 2, "renew", "details.rev", "--lease-file", file, "--token", "1")
		run(t, 2, "release", "details.rev", "--lease-file", file, "--holder", "someone")
	})

	t.Run("help", func(t *testing.T) {
		flagLine := func(t *testing.T, cmd, flag string) string {
			t.Helper()
			for _, l := range strings.Split(run(t, 0, cmd, "--help").stdout, "\n") {
				if f := strings.Fields(l); len(f) > 0 && (f[0] == "--"+flag || len(f) > 1 && f[1] == "--"+flag) {
					return l
				}
			}
			return ""
		}
		if l := flagLine(t, "renew", "lease-file"); !strings.Contains(l, "--lease-file string") {
			t.Errorf("renew --help: %q", l)
		}
		for _, cmd := range []string{"acquire", "run", "elect", "register"} {
			if l := flagLine(t, cmd, "holder"); !strings.Contains(l, "HOST-PID") || strings.Contains(l, `(default "`) {
				t.Errorf("%s --help: holder %q", cmd, l)
			}
		}
		// renew and release name a tenure's holder: no default of theirs.
		for _, cmd := range []string{"renew", "release"} {
			if l := flagLine(t, cmd, "holder"); !strings.Contains(l, "required without --lease-file") || strings.Contains(l, "HOST-PID") {
				t.Errorf("%s --help: holder %q", cmd, l)
			}
		}
		for _, cmd := range []string{"get", "ls", "revoke", "discover", "watch", "status"} {
			if l := flagLine(t, cmd, "holder"); l != "" {
				t.Errorf("%s --help offers %q", cmd, l)
			}
		}
		// One default TTL, the grantor's default.
		want := "(default " + grantor.DefaultConfig().DefaultDuration.String() + ")"
		for _, cmd := range []string{"acquire", "run", "elect"} {
			if l := flagLine(t, cmd, "ttl"); !strings.Contains(l, want) {
				t.Errorf("%s --ttl: %q, want %s", cmd, l, want)
			}
		}
	})

	t.Run("default holder and ttl", func(t *testing.T) {
		var l api.Lease
		if err := json.Unmarshal([]byte(run(t, 0, "acquire", "details.defaults", "-o", "json").stdout), &l); err != nil {
			t.Fatal(err)
		}
		host, _ := os.Hostname()
		if !regexp.MustCompile("^"+regexp.QuoteMeta(host)+`-\d+$`).MatchString(l.Holder) ||
			time.Duration(l.TTL) != grantor.DefaultConfig().DefaultDuration {
			t.Fatalf("holder %q ttl %v", l.Holder, time.Duration(l.TTL))
		}
	})

	t.Run("unknown command exits 2", func(t *testing.T) {
		run(t, 2, "frobnicate")
		run(t, 0, "help") // cobra's own commands are no unknown commands
		run(t, 0, "completion", "bash")
		run(t, 0)
	})

	t.Run("held error has the held: prefix", func(t *testing.T) {
		run(t, 0, "acquire", "details.held", "--holder", "a", "--ttl", "30s")
		if r := run(t, 3, "acquire", "details.held", "--holder", "b"); !strings.HasPrefix(r.stderr, "leased: held: ") {
			t.Fatalf("stderr %q", r.stderr)
		}
	})

	t.Run("version is the service's", func(t *testing.T) {
		v := run(t, 0, "version").stdout
		var st struct{ Grantors []struct{ Version string } }
		if err := json.Unmarshal([]byte(run(t, 0, "status", "-o", "json").stdout), &st); err != nil || len(st.Grantors) != 1 {
			t.Fatalf("status: %+v %v", st, err)
		}
		if !strings.HasPrefix(v, "leased "+st.Grantors[0].Version+" ") || st.Grantors[0].Version != api.ServiceVersion {
			t.Fatalf("leased version %q, service %q", v, st.Grantors[0].Version)
		}
	})

	t.Run("advise rounds durations", func(t *testing.T) {
		out := run(t, 0, "advise", "--rtt-p99", "100ms").stdout
		if !strings.Contains(out, "renew interval  666ms\n") || regexp.MustCompile(`\d\.\d{4,}m?s`).MatchString(out) {
			t.Fatalf("advise:\n%s", out)
		}
	})

	t.Run("register", func(t *testing.T) {
		for _, addr := range []string{"notanaddr", ":8080", "h:port", "h:70000", ""} {
			if r := run(t, 2, "register", "web", "i1", "--addr", addr); !strings.Contains(r.stderr, "--addr") {
				t.Errorf("--addr %q: %s", addr, r.stderr)
			}
		}
		cmd := exec.Command(leasedBin, "register", "web", "i1", "--addr", "127.0.0.1:8080", "--url", url)
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		out := readLines(stdout)
		line := out.wait(t, 10*time.Second, func(string) bool { return true })
		if !strings.HasPrefix(line, "registered web/i1 addr=127.0.0.1:8080 lease=svc.web.i1 token=") { // no "node=" without gossip
			t.Fatalf("register in text mode printed %q", line)
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := waitExit(cmd, 10*time.Second); err != nil {
			t.Fatalf("register after SIGTERM: %v", err)
		}
	})

	t.Run("discover explains in the user's terms", func(t *testing.T) {
		r := run(t, 2, "discover", "w*")
		if !strings.Contains(r.stderr, `SERVICE "w*" has '*' at byte 1`) || strings.Contains(r.stderr, "svc.") {
			t.Fatalf("stderr %q", r.stderr)
		}
	})

	t.Run("discover refuses a negative --max-suspicion", func(t *testing.T) {
		// It used to list every instance, as if no limit were given.
		// +Inf failed to encode (exit 1; found by an outside client).
		for _, v := range []string{"-1", "Inf", "+Inf", "NaN"} {
			r := run(t, 2, "discover", "web", "--max-suspicion", v)
			if !strings.Contains(r.stderr, "--max-suspicion") {
				t.Fatalf("--max-suspicion %s: stderr %q", v, r.stderr)
			}
		}
	})

	t.Run("errors name no Go package", func(t *testing.T) {
		for _, args := range [][]string{{"acquire", "x", "--ttl", "0s"}, {"acquire", "bé"}, {"renew", "nothing", "--holder", "h", "--token", "1", "--revision", "1", "--secret", "s"}} {
			r := leased(t, url, args...)
			if r.code == 0 || !strings.HasPrefix(r.stderr, "leased: ") || regexp.MustCompile(`\b(kvlease|fence|grantor|client|api): `).MatchString(r.stderr) {
				t.Errorf("%v: exit %d, stderr %q; want an error without Go package names", args, r.code, r.stderr)
			}
		}
	})

	t.Run("timeout must be positive", func(t *testing.T) {
		// A negative --timeout reached the connect and was reported as an
		// unavailable server (exit 1).
		for _, d := range []string{"0s", "-1s"} {
			if r := run(t, 2, "ls", "--timeout", d); !strings.Contains(r.stderr, "--timeout "+d+": want a positive duration") {
				t.Errorf("--timeout %s: stderr %q", d, r.stderr)
			}
		}
	})

	t.Run("invalid name shows the character", func(t *testing.T) {
		if r := run(t, 2, "acquire", "bé"); !strings.Contains(r.stderr, `'é' at byte 1`) {
			t.Fatalf("stderr %q", r.stderr)
		}
	})

	t.Run("a usage error says how to use the command", func(t *testing.T) {
		// It said "accepts 1 arg(s), received 0" and no more.
		for args, want := range map[string]string{
			"get":                 `usage: leased get NAME [flags] ("leased get --help" says more)`,
			"acquire x --ttl abc": `usage: leased acquire NAME [flags]`,
			"history --since=-1s": `usage: leased history [PREFIX] [flags]`,
			"frobnicate":          `"leased --help" lists the commands`,
			"aquire":              `unknown command "aquire" for "leased" (did you mean acquire?)`,
		} {
			if r := run(t, 2, strings.Fields(args)...); !strings.Contains(r.stderr, want) {
				t.Errorf("leased %s: stderr %q, want %q", args, r.stderr, want)
			}
		}
	})

	t.Run("README lists every serve flag", func(t *testing.T) {
		readme, err := os.ReadFile("../../README.md")
		if err != nil {
			t.Fatal(err)
		}
		help := run(t, 0, "serve", "--help").stdout
		for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z-]+)`).FindAllStringSubmatch(help, -1) {
			if flag := m[1]; flag != "help" && !strings.Contains(string(readme), "`--"+flag) {
				t.Errorf("README.md does not list serve --%s", flag)
			}
		}
	})

	t.Run("quick start artefacts are ignored", func(t *testing.T) {
		for _, path := range []string{"leased", "data/jetstream"} {
			out, err := exec.Command("git", "-C", "../..", "check-ignore", "-q", path).CombinedOutput()
			if err != nil {
				t.Errorf("git check-ignore %s: %v %s", path, err, out)
			}
		}
	})
}

// --help shows --url's default, LEASED_URL, with its password or token as
// xxxxx: it printed them (found by an outside client). Nor does it show
// LEASED_PASSWORD or LEASED_SECRET.
func TestHelpPrintsNoSecret(t *testing.T) {
	for _, cmd := range []string{"acquire", "ls", "run", "elect", "register", "watch", "history", "bench", "status", "revoke"} {
		c := exec.Command(leasedBin, cmd, "--help")
		c.Env = append(os.Environ(), "LEASED_URL=tls://app:url-secret@127.0.0.1:1,nats://tok-secret@127.0.0.1:2",
			"LEASED_PASSWORD=pw-secret", "LEASED_SECRET=lease-secret")
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%s --help: %v\n%s", cmd, err, out)
		}
		if regexp.MustCompile(`(url|tok|pw|lease)-secret`).Match(out) {
			t.Errorf("%s --help prints a secret:\n%s", cmd, out)
		}
		if !strings.Contains(string(out), "tls://app:xxxxx@127.0.0.1:1,nats://xxxxx@127.0.0.1:2") {
			t.Errorf("%s --help: no redacted --url default in\n%s", cmd, out)
		}
	}
}
