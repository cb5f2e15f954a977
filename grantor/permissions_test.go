package grantor_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/client"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// The permissions of docs/api.md on a real server: an application user can
// take leases but its revocations are refused by the server; an operator's
// go through.
func TestRevokeRestrictedByNATSPermissions(t *testing.T) {
	url := authServer(t, appUser("app"), appUser("app2"), &server.User{Username: "operator", Password: "operator"}, leasedUser())
	startOnConn(t, kvleasetest.Connect(t, withUser(url, "leased"), nats.CustomInboxPrefix("_INBOX_leased")), grantor.DefaultConfig())

	var mu sync.Mutex
	var violations []string
	app := newClient(t, kvleasetest.Connect(t, withUser(url, "app"),
		nats.CustomInboxPrefix("_INBOX_app"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			defer mu.Unlock()
			violations = append(violations, err.Error())
		})), client.WithTimeout(time.Second))
	operator := newClient(t, kvleasetest.Connect(t, withUser(url, "operator")))
	ctx := t.Context()

	rec, err := app.Grant(ctx, kvlease.GrantRequest{Name: "guarded", Holder: "app-1", Duration: 10 * time.Second})
	if err != nil {
		t.Fatalf("app grant: %v", err)
	}
	if _, err := app.Revoke(ctx, "guarded", "not allowed"); err == nil {
		t.Fatal("app user revoked a lease")
	}
	mu.Lock()
	seen := strings.Join(violations, "; ")
	mu.Unlock()
	if !strings.Contains(strings.ToLower(seen), "permissions violation") || !strings.Contains(seen, api.SubjectRevoke) {
		t.Fatalf("no permissions violation for %s reported: %q", api.SubjectRevoke, seen)
	}
	if got, err := app.Get(ctx, "guarded"); err != nil || got.Token != uint64(rec.Token) {
		t.Fatalf("lease after refused revoke: %+v, %v", got, err)
	}
	if _, err := operator.Revoke(ctx, "guarded", "maintenance"); err != nil {
		t.Fatalf("operator revoke: %v", err)
	}
	if _, err := app.Get(ctx, "guarded"); !errors.Is(err, kvlease.ErrNotFound) {
		t.Fatalf("after operator revoke: %v, want ErrNotFound", err)
	}
}

// appUser may call lease.v1 and receive replies on its own inbox prefix
// only: it can neither read other users' replies (grant secrets) nor forge
// replies, nor revoke.
func appUser(name string) *server.User {
	return &server.User{Username: name, Password: name, Permissions: &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{"lease.v1.>"}},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX_" + name + ".>"}},
	}}
}

// Another application user cannot read a grant's reply, which carries the
// secret.
func TestAppUsersCannotReadEachOthersReplies(t *testing.T) {
	url := authServer(t, appUser("app"), appUser("app2"), leasedUser())
	startOnConn(t, kvleasetest.Connect(t, withUser(url, "leased"), nats.CustomInboxPrefix("_INBOX_leased")), grantor.DefaultConfig())
	violation := make(chan error, 4)
	spy := kvleasetest.Connect(t, withUser(url, "app2"), nats.CustomInboxPrefix("_INBOX_app2"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violation <- err }))
	for _, subj := range []string{"_INBOX.>", "_INBOX_app.>", ">"} {
		sub, err := spy.SubscribeSync(subj)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-violation:
			if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				t.Fatalf("subscribe %s: %v", subj, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("app2 may subscribe to %s", subj)
		}
		_ = sub.Unsubscribe()
	}
	app := newClient(t, kvleasetest.Connect(t, withUser(url, "app"), nats.CustomInboxPrefix("_INBOX_app")))
	if _, err := app.Grant(t.Context(), kvlease.GrantRequest{Name: "mine", Holder: "app", Duration: 5 * time.Second}); err != nil {
		t.Fatalf("grant with a private inbox: %v", err)
	}
}

// leasedUser is the service's own user: it answers on lease.> and $SRV.>
// and receives replies on its own inbox prefix.
func leasedUser() *server.User {
	return &server.User{Username: "leased", Password: "leased", Permissions: &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{">"}},
		Subscribe: &server.SubjectPermission{Allow: []string{"lease.>", "svc.v1.>", "$SRV.>", "_INBOX_leased.>"}},
	}}
}

// authServer starts a JetStream server with these users and returns its URL.
func authServer(t *testing.T, users ...*server.User) string {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoSigs: true, Users: users})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	return ns.ClientURL()
}

func withUser(url, user string) string {
	return strings.Replace(url, "nats://", "nats://"+user+":"+user+"@", 1)
}
