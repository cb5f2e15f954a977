package kvlease_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease"
)

func TestRetryUnavailable(t *testing.T) {
	const ms = time.Millisecond
	unavailable := fmt.Errorf("%w: no responders", kvlease.ErrUnavailable)
	refused := errors.New("refused")
	for _, c := range []struct {
		name     string
		maxWait  time.Duration
		timeout  time.Duration   // of ctx; 0: none
		fails    int             // attempts that fail with ErrUnavailable first
		last     error           // what the attempt after them returns
		want     error           // RetryUnavailable's error
		attempts []time.Duration // when attempts start
	}{
		{name: "success at once", maxWait: time.Second, attempts: []time.Duration{0}},
		{name: "refusal at once", maxWait: time.Second, last: refused, want: refused, attempts: []time.Duration{0}},
		{name: "backoff doubles", maxWait: time.Second, fails: 3, attempts: []time.Duration{0, 50 * ms, 150 * ms, 350 * ms}},
		{name: "backoff capped", maxWait: 120 * ms, fails: 4, last: refused, want: refused,
			attempts: []time.Duration{0, 50 * ms, 150 * ms, 270 * ms, 390 * ms}},
		{name: "cap below the first wait", maxWait: 0, fails: 2, attempts: []time.Duration{0, 50 * ms, 100 * ms}},
		{name: "ctx ends during a wait", maxWait: time.Second, timeout: 100 * ms, fails: 100, want: unavailable,
			attempts: []time.Duration{0, 50 * ms}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				if c.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, c.timeout)
					defer cancel()
				}
				start := time.Now()
				var attempts []time.Duration
				waits := 0
				v, err := kvlease.RetryUnavailable(ctx, c.maxWait, func(err error) {
					if !errors.Is(err, kvlease.ErrUnavailable) {
						t.Errorf("onWait(%v), want the unavailable error", err)
					}
					waits++
				}, func() (int, error) {
					attempts = append(attempts, time.Since(start))
					if len(attempts) <= c.fails {
						return -1, unavailable
					}
					return 7, c.last
				})
				if err != c.want {
					t.Errorf("err = %v, want %v", err, c.want)
				}
				wantV := 7 // what the last attempt returned
				if c.want == unavailable {
					wantV = 0 // ctx ended while waiting
				}
				if v != wantV {
					t.Errorf("value %d, want %d", v, wantV)
				}
				if !slices.Equal(attempts, c.attempts) {
					t.Errorf("attempts at %v, want %v", attempts, c.attempts)
				}
				if wantWaits := min(c.fails, len(c.attempts)); waits != wantWaits {
					t.Errorf("onWait called %d times, want %d", waits, wantWaits)
				}
			})
		})
	}
}

// An attempt that fails after ctx has ended is not retried, and its error
// is returned as it is.
func TestRetryUnavailableAfterCtx(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	n := 0
	_, err := kvlease.RetryUnavailable(ctx, time.Second, nil, func() (struct{}, error) {
		n++
		return struct{}{}, fmt.Errorf("%w: %w", kvlease.ErrUnavailable, ctx.Err())
	})
	if n != 1 || !errors.Is(err, kvlease.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("%d attempts, err %v; want 1 attempt and its error", n, err)
	}
}

// A placement refused for a peer that is offline is tried again, as while a
// cluster starts (a node exited for good when its history stream met one);
// one refused for a reason that stays is not.
func TestJetStreamErrorOfAnOfflinePeer(t *testing.T) {
	offline := &jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement, peer offline"}
	if err := kvlease.JetStreamError("open history", offline); !errors.Is(err, kvlease.ErrUnavailable) {
		t.Errorf("a peer offline: %v; want ErrUnavailable", err)
	}
	for _, desc := range []string{
		"no suitable peers for placement, tags not matched ['az:x']",
		"no suitable peers for placement, peer offline, insufficient storage",
	} {
		refused := &jetstream.APIError{Code: 400, ErrorCode: 10005, Description: desc}
		if err := kvlease.JetStreamError("open history", refused); errors.Is(err, kvlease.ErrUnavailable) || !errors.Is(err, kvlease.ErrBucket) {
			t.Errorf("%s: %v; want ErrBucket", desc, err)
		}
	}
}
