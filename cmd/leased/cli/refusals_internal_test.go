package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leased/leased/kvlease"
)

// A command's release (cleanupContext) ends at once at a refusal of a
// kind not seen before it began (its own publish refused), not at another
// refusal of a renewal already refused: in CI, acquire --hold for a user
// who may not renew had its release cut short by the refusal of the
// keeper's renewal sent again, and left the lease held.
func TestCleanupEndsOnlyAtANewRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r refusals
		ctx := context.WithValue(t.Context(), refusalsKey{}, &r)
		renew := &PermissionError{Op: "publish", Subject: "lease.v1.renew", Err: nats.ErrPermissionViolation}
		release := &PermissionError{Op: "publish", Subject: "lease.v1.release", Err: nats.ErrPermissionViolation}
		r.add(renew)

		rctx, cancel := cleanupContext(ctx, time.Minute)
		defer cancel()
		r.add(&PermissionError{Op: "publish", Subject: "lease.v1.renew", Err: nats.ErrPermissionViolation})
		synctest.Wait()
		if err := rctx.Err(); err != nil {
			t.Fatalf("the release's context ended at a renewal refused again: %v", context.Cause(rctx))
		}
		r.add(release)
		<-rctx.Done()
		if cause := context.Cause(rctx); !errors.Is(cause, release) {
			t.Fatalf("the release's context ended with %v, want the release's refusal", cause)
		}
		if got := deniedCause(ctx); !errors.Is(got, renew) {
			t.Errorf("deniedCause %v, want the first refusal", got)
		}
	})
}

// A refusal the call itself recognised (kvlease.Open's ErrPermission, once
// it stopped waiting for the answer the server never sends) is the
// command's permission denial, exit 7, as the error handler's is: it came
// back before nats.go's error handler had cancelled the command's context,
// and elect on a bucket its user may not update exited 1 or 7 as that race
// went (18 times in 30 runs: 1).
func TestPermissionCauseOfARefusalTheCallReturned(t *testing.T) {
	const subject = "$JS.API.STREAM.UPDATE.KV_old"
	violation := fmt.Errorf("%w: Permissions Violation for Publish to %q", nats.ErrPermissionViolation, subject)
	err := fmt.Errorf("%w: bucket %q does not allow atomic batch publishes, and this user may not allow them: %w: %w",
		kvlease.ErrBucket, "old", kvlease.ErrPermission, violation)
	got := permissionCause(context.Background(), err) // no cause yet: the error handler has not run
	if !errors.Is(got, ErrPermissionDenied) || exitCode(got) != ExitDenied || !strings.Contains(got.Error(), subject) {
		t.Fatalf("permissionCause: %v (exit %d), want ErrPermissionDenied, exit %d, naming %s", got, exitCode(got), ExitDenied, subject)
	}
	if other := errors.New("kvlease: grantor unavailable"); permissionCause(context.Background(), other) != other {
		t.Fatal("an error that is no refusal changed")
	}
}

// A refusal of what a command needs beyond the lease service says which
// user of docs/api.md may: the app user's history and discover said only
// which subject was refused, where elect, watch and status name the
// bucket's reader (found following the documented users, s21b).
func TestPermissionErrorSaysWhoMay(t *testing.T) {
	for _, tc := range []struct{ subject, want string }{
		{"$JS.API.STREAM.INFO.LEASED_HISTORY_leases", "the auditor user of docs/api.md"},
		{"$JS.API.CONSUMER.CREATE.LEASED_HISTORY_leases.x.y", "the auditor user of docs/api.md"},
		{"svc.v1.discover", "svc.v1.discover"},
	} {
		err := &PermissionError{Op: "publish", Subject: tc.subject, Err: nats.ErrPermissionViolation}
		if msg := err.Error(); !strings.Contains(msg, tc.want) || !strings.Contains(msg, " (") {
			t.Errorf("publish to %s refused: %q, want a hint naming %q", tc.subject, msg, tc.want)
		}
	}
}
