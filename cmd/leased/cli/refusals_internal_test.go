package cli

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
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
