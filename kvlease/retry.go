package kvlease

import (
	"context"
	"errors"
	"time"
)

// RetryUnavailable calls attempt until it returns anything but an error
// wrapping [ErrUnavailable], or ctx ends, and returns what attempt
// returned. Between attempts it waits 50 ms, doubling the wait each time up
// to maxWait (at least 50 ms), and calls onWait (if not nil) with the
// attempt's error before each wait, on the caller's goroutine. It is the
// loop for callers that must wait out a cluster that is electing its
// leaders or a stream that is catching up: [Open] uses it, and so do the
// grantor's watches and the election's campaigns.
//
// ctx bounds the retrying, not the attempts: attempt chooses its own
// context (Open bounds each try by a few seconds; a watch that is to
// outlive ctx does not use ctx at all). An attempt that fails after ctx
// has ended is not retried. If ctx ends during a wait, RetryUnavailable
// returns the zero T and the last attempt's error, which wraps
// ErrUnavailable, not ctx's error. An error that wraps [ErrConnClosed] is
// returned at once: a closed connection never comes back.
func RetryUnavailable[T any](ctx context.Context, maxWait time.Duration, onWait func(error), attempt func() (T, error)) (T, error) {
	const firstWait = 50 * time.Millisecond
	maxWait = max(maxWait, firstWait)
	for wait := firstWait; ; wait = min(2*wait, maxWait) {
		v, err := attempt()
		if err == nil || !errors.Is(err, ErrUnavailable) || ctx.Err() != nil || errors.Is(err, ErrConnClosed) {
			return v, err
		}
		if onWait != nil {
			onWait(err)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			var zero T
			return zero, err
		}
	}
}
