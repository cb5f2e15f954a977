package kvlease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// startServerWithUsers starts a JetStream server with an admin and a user,
// "creator", that may publish anything but stream updates
// ($JS.API.STREAM.UPDATE.>): it may create buckets but not change them.
func startServerWithUsers(t *testing.T) *kvleasetest.Server {
	t.Helper()
	return kvleasetest.NewServer(t, kvleasetest.WithUsers(
		&server.User{Username: "admin", Password: "admin"},
		&server.User{Username: "creator", Password: "creator", Permissions: kvleasetest.PublishExcept("$JS.API.STREAM.UPDATE.>")},
	))
}

// A NATS user that may create streams but not update them opened the
// lease bucket: Open updated the stream (to allow atomic batches, to
// record the bucket's policy), the update got no answer, only a
// permissions violation on the connection's error handler, and Open
// retried it as if JetStream were out, until its ctx ended (found by an
// outside client). A bucket Open creates needs no update; an update the
// bucket does need fails at once, naming the permission; one it can do
// without (the policy) is skipped.
func TestOpenWithoutStreamUpdatePermission(t *testing.T) {
	ns := startServerWithUsers(t)
	admin := kvleasetest.JetStream(t, kvleasetest.Connect(t, ns.ClientURL(), nats.UserInfo("admin", "admin")))
	ctx := t.Context()
	// An old bucket: made before atomic batches (as Open made it then).
	if _, err := admin.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "old", History: 1,
		Storage: jetstream.FileStorage, LimitMarkerTTL: kvlease.DefaultMarkerTTL}); err != nil {
		t.Fatal(err)
	}
	// An old bucket that allows them, without the policy recorded.
	if _, err := kvlease.Open(ctx, admin, kvlease.WithBucket("atomic")); err != nil {
		t.Fatal(err)
	}
	creator := kvleasetest.JetStream(t, kvleasetest.Connect(t, ns.ClientURL(), nats.UserInfo("creator", "creator"),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})))
	const updateOld = `$JS.API.STREAM.UPDATE.KV_old`
	for _, tc := range []struct {
		name    string
		bucket  string
		opts    []kvlease.Option
		refused bool // with ErrBucket and ErrPermission, naming updateOld
	}{
		{name: "new bucket", bucket: "new"},
		{name: "new bucket with policy", bucket: "new-policy", opts: []kvlease.Option{kvlease.WithBucketPolicy()}},
		{name: "old bucket", bucket: "old", refused: true},
		{name: "old bucket with policy", bucket: "old", opts: []kvlease.Option{kvlease.WithBucketPolicy()}, refused: true},
		{name: "old bucket without batching", bucket: "old", opts: []kvlease.Option{kvlease.WithoutBatching()}},
		{name: "old bucket with policy without batching", bucket: "old",
			opts: []kvlease.Option{kvlease.WithoutBatching(), kvlease.WithBucketPolicy()}},
		{name: "atomic bucket", bucket: "atomic"},
		{name: "atomic bucket with policy", bucket: "atomic", opts: []kvlease.Option{kvlease.WithBucketPolicy()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Far beyond a few round trips: Open waited all of it.
			octx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			start := time.Now()
			st, err := kvlease.Open(octx, creator, append([]kvlease.Option{kvlease.WithBucket(tc.bucket)}, tc.opts...)...)
			took := time.Since(start)
			if octx.Err() != nil {
				t.Fatalf("Open waited %v, until its ctx ended: %v", took, err)
			}
			if tc.refused {
				if !errors.Is(err, kvlease.ErrPermission) || !errors.Is(err, kvlease.ErrBucket) || !strings.Contains(err.Error(), updateOld) {
					t.Fatalf("Open: %v, want ErrPermission and ErrBucket naming %s", err, updateOld)
				}
				t.Log(err)
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			rec, err := st.Grant(ctx, kvlease.GrantRequest{Name: "a." + strings.ReplaceAll(tc.name, " ", "-"), Holder: "h", Duration: 5 * time.Second})
			if err != nil {
				t.Fatalf("grant: %v", err)
			}
			if err := st.Release(ctx, kvlease.ReleaseRequest{Name: rec.Name, Holder: "h", Token: rec.Token, Revision: rec.Revision}); err != nil {
				t.Fatalf("release: %v", err)
			}
		})
	}
	// The new buckets were made as Open makes them for any user: allowing
	// atomic batches, the policy recorded when asked for.
	for bucket, policy := range map[string]bool{"new": false, "new-policy": true} {
		s, err := admin.Stream(ctx, kvlease.StreamName(bucket))
		if err != nil {
			t.Fatal(err)
		}
		cfg := s.CachedInfo().Config
		if !cfg.AllowAtomicPublish || (cfg.Metadata["leased.grantor_margin"] != "") != policy {
			t.Errorf("bucket %s: allow atomic %v, metadata %v", bucket, cfg.AllowAtomicPublish, cfg.Metadata)
		}
	}
}

// A NATS user that may not create streams opening a bucket that is
// missing, or one that may not read a bucket's stream info: the request
// gets no answer, only a permissions violation on the connection's error
// handler, and Open waited until its ctx ended, as while JetStream is out.
// It returns ErrPermission naming the subject after one attempt.
func TestOpenWithoutStreamPermissions(t *testing.T) {
	ns := kvleasetest.NewServer(t, kvleasetest.WithUsers(
		&server.User{Username: "admin", Password: "admin"},
		&server.User{Username: "user", Password: "user", Permissions: kvleasetest.PublishExcept("$JS.API.STREAM.CREATE.>", "$JS.API.STREAM.INFO.KV_hidden")},
	))
	ctx := t.Context()
	admin := kvleasetest.JetStream(t, kvleasetest.Connect(t, ns.ClientURL(), nats.UserInfo("admin", "admin")))
	if _, err := kvlease.Open(ctx, admin, kvlease.WithBucket("hidden")); err != nil {
		t.Fatal(err)
	}
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, ns.ClientURL(), nats.UserInfo("user", "user"),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})))
	for bucket, subject := range map[string]string{
		"missing": "$JS.API.STREAM.CREATE.KV_missing",
		"hidden":  "$JS.API.STREAM.INFO.KV_hidden",
	} {
		t.Run(bucket, func(t *testing.T) {
			octx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			start := time.Now()
			_, err := kvlease.Open(octx, js, kvlease.WithBucket(bucket))
			if octx.Err() != nil || !errors.Is(err, kvlease.ErrPermission) || !errors.Is(err, nats.ErrPermissionViolation) ||
				!strings.Contains(err.Error(), subject) {
				t.Fatalf("Open after %v: %v, want ErrPermission naming %s before ctx ended", time.Since(start), err, subject)
			}
			t.Log(time.Since(start), err)
		})
	}
}
