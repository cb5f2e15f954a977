package main_test

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// A refusal that the connection recovers from (the user is back at the
// reconnect: an auth callout restarting, say) does not count against the
// next one, as nats.go counts them (it resets a server's last error at a
// successful connect): counted for the whole session, two such blips
// hours apart ended a healthy `acquire --hold` (or run, elect, register)
// with exit 7.
func TestAuthorizationBlipsAreForgivenOnReconnect(t *testing.T) {
	users := func(temp bool) string {
		more := ""
		if temp {
			more = `{ user: temp, password: "temp-pw" }`
		}
		return "authorization { users = [\n{ user: leased, password: \"leased-pw\" }\n" + more + "\n] }"
	}
	refused := make(chan struct{}, 16)
	ns, reloadAuth := startAuthServer(t, users(true), refusalLog{refused})
	reload := func(temp bool) { reloadAuth(users(temp)) }
	// tempConn is the id of temp's connection, 0 for none.
	tempConn := func() uint64 {
		cz, err := ns.Connz(&natsserver.ConnzOptions{Username: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cz.Conns {
			if c.AuthorizedUser == "temp" {
				return c.Cid
			}
		}
		return 0
	}
	hostPort := strings.TrimPrefix(ns.ClientURL(), "nats://")
	as := func(user string) string { return "nats://" + user + ":" + user + "-pw@" + hostPort }

	serveOn(t, as("leased")).wait(t, 30*time.Second, func(l string) bool { return strings.Contains(l, `"msg":"ready"`) })

	hold := exec.Command(leasedBin, "acquire", "blip", "--hold", "--ttl", "30s", "--url", as("temp"))
	out, _ := hold.StdoutPipe()
	var stderr bytes.Buffer
	hold.Stderr = &stderr
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hold.Process.Kill(); _ = hold.Wait() })
	readLines(out).wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "blip") })

	for blip := range 2 {
		before := tempConn()
		if before == 0 {
			t.Fatalf("blip %d: temp is not connected; stderr %q", blip, stderr.String())
		}
		// temp is removed (its connection closed), its first reconnect is
		// refused (an Authorization Violation), and it is back for the next
		// (250 ms on): one refusal, recovered from.
		reload(false)
		select {
		case <-refused:
		case <-time.After(10 * time.Second):
			t.Fatalf("blip %d: temp's reconnect was not refused", blip)
		}
		reload(true)
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) { // bounded poll of the server's state
			if c := tempConn(); c != 0 && c != before {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("blip %d: temp did not reconnect within 10 s; stderr %q", blip, stderr.String())
			}
		}
	}
	if err := hold.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(hold, 20*time.Second); err != nil {
		t.Fatalf("acquire --hold after two refusals it recovered from, then SIGTERM: %v; want exit 0; stderr %q", err, stderr.String())
	}
}

// refusalLog is a nats-server logger that tells refused when a client is
// refused for its credentials.
type refusalLog struct{ refused chan struct{} }

func (l refusalLog) Errorf(format string, v ...any) {
	if strings.Contains(fmt.Sprintf(format, v...), "temp") {
		select {
		case l.refused <- struct{}{}:
		default:
		}
	}
}
func (refusalLog) Noticef(string, ...any) {}
func (refusalLog) Warnf(string, ...any)   {}
func (refusalLog) Fatalf(string, ...any)  {}
func (refusalLog) Debugf(string, ...any)  {}
func (refusalLog) Tracef(string, ...any)  {}
